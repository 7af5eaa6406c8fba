import FoundationEssentials
import NIOConcurrencyHelpers
import SleepProxyControl
import SleepProxyCore

/// The status other threads read (`sleepproxyctl`, the metrics, the status page, the Home Assistant link): a copy
/// of the engine's counts published after every batch, under `statusLock`, and the notes the daemon adds to it.
extension EngineRunner {
    public var currentStatus: Status {
        self.statusLock.lock()
        defer { self.statusLock.unlock() }
        var status = self.status
        status.droppedDatagrams =
            self.mailbox.dropped - self.mailbox.dropped(lane: Event.framesLane) + (self.mdns?.droppedByKernel ?? 0)
            + (self.ssdpSockets?.droppedByKernel ?? 0)
        // Frames refused by the mailbox are counted by PacketLinks with those over its byte budget.
        status.droppedFrames = self.packets?.droppedFrames ?? 0
        status.unicastSendsDeferred =
            (self.mdns?.deferredUnicastSends ?? 0) + (self.ssdpSockets?.deferredUnicastSends ?? 0)
        status.unicastSendsFailed = (self.mdns?.failedUnicastSends ?? 0) + (self.ssdpSockets?.failedUnicastSends ?? 0)
        status.multicastSocketsReopened = (self.mdns?.reopened ?? 0) + (self.ssdpSockets?.reopened ?? 0)
        return status
    }

    /// A SIGHUP's outcome, for `sleepproxyctl status` and the API (a refused file is otherwise only in the log).
    public func noteReload(succeeded: Bool, message: String) {
        let reload = DaemonStatus.Reload(time: Date(), succeeded: succeeded, message: message)
        self.statusLock.withLock { self.status.lastReload = reload }
    }

    public func updateHomeAssistant(_ update: (inout DaemonStatus.MQTTLinkStatus) -> Void) {
        self.statusLock.withLock {
            guard var mqtt = self.status.mqtt else { return }
            update(&mqtt)
            self.status.mqtt = mqtt
        }
    }

    /// Shows the link in `status` from the start (not connected yet).
    public func noteHomeAssistant(broker: String) {
        self.statusLock.withLock { self.status.mqtt = DaemonStatus.MQTTLinkStatus(broker: broker) }
    }

    func publishStatus() {
        let counts = self.engine.counts
        let now = SystemClock.now()
        var byState: [HostState: Int]? = nil
        var ssdpEntries: (Int, Int)? = nil
        if self.hostsByStateAt.map({ now - $0 >= EngineRunner.hostsByStateInterval }) ?? true {
            byState = self.engine.hostsByState
            if let upnp = self.engine.upnpSummary { ssdpEntries = (upnp.entries, upnp.unclaimedEntries) }
            self.hostsByStateAt = now
            self.hostsByStateBehind = false
        } else {
            self.hostsByStateBehind = true
        }
        self.statusLock.withLock {
            self.status.hostCount = counts.hosts
            self.status.recordCount = counts.records
            self.status.statistics = counts.registrations
            if let byState { self.status.hostsByState = byState }
            if let (held, unclaimed) = ssdpEntries {
                self.status.ssdpEntries = held
                self.status.ssdpUnclaimedEntries = unclaimed
            }
            self.status.ssdp = counts.ssdp
            self.status.batches += 1
            self.status.handBacks = counts.handBacks
            self.status.repeatedQuestions = counts.repeatedQuestions
            self.status.windows = counts.windows
            if let responder = counts.responder {
                self.status.responder = responder
                self.status.instanceLabel = counts.instanceLabel
            }
            if let takeover = counts.takeover { self.status.takeover = takeover }
            if let decisions = counts.wakeDecisions { self.status.wakeDecisions = decisions }
        }
    }

    /// The counts by state cost one pass over every host (docs/scale.md): at most
    /// once this often.
    static let hostsByStateInterval: Duration = .seconds(1)
}
