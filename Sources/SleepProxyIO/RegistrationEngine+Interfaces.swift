import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxySystem
import SleepProxyWire

/// The served interfaces: read from the kernel, refreshed on netlink news or every 30 s.
extension RegistrationEngine {
    func servedInterface(index: Int?, now: Timestamp) -> InterfaceInventory.Interface? {
        guard let index else { return nil }
        if self.inventory.interface(index: index) == nil { self.refreshInventory(now: now) }
        guard let interface = self.inventory.interface(index: index) else { return nil }
        if self.configuration.interfaces.isEmpty {
            return self.inventory.defaultServed.contains { $0.context.index == index } ? interface : nil
        }
        return self.configuration.interfaces.contains(interface.context.name) ? interface : nil
    }

    func refreshInventory(now: Timestamp) {
        do {
            self.inventory = try InterfaceInventory.read()
        } catch {
            self.logger.warning("interfaces: cannot read the interface list: \(error)")
        }
        self.inventoryReadAt = now
        let served =
            self.configuration.interfaces.isEmpty
            ? self.inventory.defaultServed.map(\.context)
            : self.inventory.interfaces.filter { self.configuration.interfaces.contains($0.context.name) && $0.isUp }
                .map(\.context)
        guard served != self.servedContexts else { return }
        self.servedContexts = served
        self.packets?.serve(served.map { (index: $0.index, name: $0.name) })
        if self.engine.responder != nil { self.mdns?.serve(served) }
        self.ssdpSockets?.serve(served)
        var batch = Batch()
        self.perform(self.engine.setInterfaces(served, now: now), into: &batch)
        self.sendMulticast(&batch)
    }
}
