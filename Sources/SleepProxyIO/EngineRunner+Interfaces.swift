import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxySystem
import SleepProxyWire

/// The served interfaces: read from the kernel, refreshed on netlink news or every 30 s.
extension EngineRunner {
    /// The served interface a datagram came in on, nil for one the proxy does not serve. An index not seen yet
    /// (an interface added a moment ago) reads the kernel's list first.
    func servedInterface(index: Int?, now: Timestamp) -> InterfaceContext? {
        guard let index else { return nil }
        if self.engine.interfaces[index] == nil, self.inventory.interface(index: index) == nil {
            self.refreshInventory(now: now)
        }
        return self.engine.interfaces[index]
    }

    /// Reads the kernel's interfaces; the engine picks the served ones (`ProxyEngine.interfacesListed`).
    func refreshInventory(now: Timestamp) {
        do {
            self.inventory = try InterfaceInventory.read()
        } catch {
            self.logger.warning("interfaces: cannot read the interface list: \(error)")
        }
        self.inventoryReadAt = now
        var batch = Batch()
        self.perform(
            self.engine.interfacesListed(self.inventory.interfaces, named: self.configuration.interfaces, now: now),
            into: &batch)
        self.sendMulticast(&batch)
    }

    /// `.serve`: sockets, captures and group memberships follow the served interfaces.
    func serve(_ served: [InterfaceContext]) {
        self.packets?.serve(served.map { (index: $0.index, name: $0.name) })
        self.mdns?.serve(served)
        self.ssdpSockets?.serve(served)
        self.notePolledSockets()
    }
}
