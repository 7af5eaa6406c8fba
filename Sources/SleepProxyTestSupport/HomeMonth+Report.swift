extension HomeMonth.Report {
    /// A table has grown when its largest count of a day, averaged over the late window, passes the same average
    /// over the early window by more than this share, or by more than `growthSlack` for a small table. An average of
    /// daily highs, because a queue that empties every second (echoes awaiting their loopback, a record's last
    /// multicasts) is at a different height at each hourly count; a leak of one element a day shows as about 17
    /// between the weeks of a month.
    public static let growthShare = 0.02
    public static let growthSlack = 2.0
    /// The heap may vary by this much between the windows (the allocator's free lists, one scan's worth of frames).
    public static let heapSlackBytes = 256 * 1024

    /// Every table whose average daily high grew from the early window to the late one, with both averages.
    public var grownTables: [(path: String, early: Double, late: Double)] {
        guard let windows = self.windows, self.daysRun >= windows.late.upperBound else { return [] }
        return Set(self.earlyLargest.keys).union(self.lateLargest.keys).sorted().compactMap { path in
            let early = Double(self.earlyLargest[path] ?? 0) / Double(windows.early.count)
            let late = Double(self.lateLargest[path] ?? 0) / Double(windows.late.count)
            return late > early + max(Self.growthSlack, early * Self.growthShare) ? (path, early, late) : nil
        }
    }

    /// The largest heap in use in each window.
    public var heap: (early: Int, late: Int)? {
        guard let windows = self.windows, self.daysRun >= windows.late.upperBound else { return nil }
        return (
            windows.early.map { self.heapBytes[$0] }.max() ?? 0, windows.late.map { self.heapBytes[$0] }.max() ?? 0
        )
    }

    public var heapGrew: Bool { self.heap.map { $0.late > $0.early + Self.heapSlackBytes } ?? false }

    /// The largest tables of the last day, for the report.
    public var largestTables: [(path: String, count: Int)] {
        self.lastDay.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.map { ($0.key, $0.value) }
    }
}
