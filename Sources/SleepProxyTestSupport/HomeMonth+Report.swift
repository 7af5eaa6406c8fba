extension HomeMonth.Report {
    /// A table has grown when its largest count in the late window passes its largest in the early one by more
    /// than this share, or by more than `slack` elements for a small one: the hosts that happen to sleep at once, or
    /// the noise of one hour, vary the size from day to day; a leak of one element a day over three weeks does not
    /// hide in it.
    public static let growthShare = 0.02
    public static let growthSlack = 2
    /// The heap may vary by this much between the windows (the allocator's free lists, one scan's worth of frames).
    public static let heapSlackBytes = 256 * 1024

    /// The days compared: the week after the first day (which fills the tables from empty) and the last week; a
    /// short run compares its two halves after the first day.
    public var windows: (early: Range<Int>, late: Range<Int>)? {
        let width = min(7, (self.days.count - 1) / 2)
        guard width > 0 else { return nil }
        return (1..<(1 + width), (self.days.count - width)..<self.days.count)
    }

    /// Every table whose largest count grew from the early window to the late one, with both figures.
    public var grownTables: [(path: String, early: Int, late: Int)] {
        guard let windows = self.windows else { return [] }
        var paths = Set<String>()
        for day in self.days { paths.formUnion(day.largest.keys) }
        return paths.sorted().compactMap { path in
            let early = self.days[windows.early].map { $0.largest[path] ?? 0 }.max() ?? 0
            let late = self.days[windows.late].map { $0.largest[path] ?? 0 }.max() ?? 0
            let allowed = early + max(Self.growthSlack, Int(Double(early) * Self.growthShare))
            return late > allowed ? (path, early, late) : nil
        }
    }

    /// The largest heap in use in each window.
    public var heap: (early: Int, late: Int)? {
        guard let windows = self.windows else { return nil }
        return (
            self.days[windows.early].map(\.heapBytes).max() ?? 0, self.days[windows.late].map(\.heapBytes).max() ?? 0
        )
    }

    public var heapGrew: Bool { self.heap.map { $0.late > $0.early + Self.heapSlackBytes } ?? false }

    /// The largest tables at the end, for the report.
    public var largestTables: [(path: String, count: Int)] {
        guard let last = self.days.last else { return [] }
        return last.largest.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.map { ($0.key, $0.value) }
    }
}
