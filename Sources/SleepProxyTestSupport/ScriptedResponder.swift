import Foundation

/// A host's mDNS responder that says exactly what a real one says, for the lab (docs/adoption.md §3):
///
/// - `.macOS15`: the Mac of `macos15-sleep-goodbyes.pcap` (Apple's mDNSResponder as macOS 15 ships it): its
///   captured announcement at start, its captured answer to every question for its name, its captured answer to
///   a browse of its types, and at sleep its two captured goodbye packets (one per address family), then
///   nothing. Its service removal while awake is the goodbye of one PTR, repeated 2 s apart, as macOS sends it.
/// - `.windows(name:address:)`: a Windows 10 or 11 PC, which answers only A questions for `NAME.local` and
///   announces nothing; it says nothing at sleep.
///
/// Its life is bounded (`seconds`); it is stopped by PID with the lab.
public final class ScriptedResponder: @unchecked Sendable {
    public enum Kind: Sendable {
        case macOS15(capture: URL)
        case windows(name: String, address: String)
    }

    public let process: ManagedProcess

    static let script = #"""
        import os, signal, socket, struct, sys, time, select
        kind, seconds = sys.argv[1], float(sys.argv[2])
        deadline = time.time() + seconds
        ifindex = socket.if_nametoindex('eth0')

        def name_bytes(text):
            out = b''
            for label in text.split('.'):
                if label: out += bytes([len(label.encode())]) + label.encode()
            return out + b'\x00'

        if kind == 'mac':
            data = open(sys.argv[3], 'rb').read()
            payloads, off = [], 24
            while off < len(data):
                length = struct.unpack('<I', data[off + 8:off + 12])[0]
                frame = data[off + 16:off + 16 + length]
                off += 16 + length
                payloads.append(frame[42:] if frame[12:14] == b'\x08\x00' else frame[62:])
            answer, announce4, announce6, bye4, bye6 = payloads[1], payloads[2], payloads[3], payloads[36], payloads[37]
            own = name_bytes('Bueros-MacBook.local').lower()
            types = [name_bytes(t).lower()[:-6] for t in ('_services._dns-sd._udp', '_smb._tcp', '_http._tcp')]
            ptr = name_bytes('_smb._tcp.local')
            removal = (struct.pack('>HHHHHH', 0, 0x8400, 0, 1, 0, 0) + ptr + struct.pack('>HHIH', 12, 1, 0, 0))
            target = bytes([len('B\u00fcro MacBook'.encode())]) + 'B\u00fcro MacBook'.encode() + b'\xc0\x0c'
            removal = removal[:-2] + struct.pack('>H', len(target)) + target
        else:
            host, address = sys.argv[3], sys.argv[4]
            own = name_bytes(host + '.local').lower()
            answer = (struct.pack('>HHHHHH', 0, 0x8400, 0, 1, 0, 0) + name_bytes(host + '.local')
                      + struct.pack('>HHIH', 1, 0x8001, 120, 4) + socket.inet_aton(address))
            types = []

        def first_question_is_qu(query):
            at = 12
            while at < len(query) and query[at] != 0 and query[at] < 64: at += 1 + query[at]
            return at + 5 <= len(query) and query[at] == 0 and query[at + 3] & 0x80 != 0

        v4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        v4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        v4.bind(('', 5353))
        v4.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton('224.0.0.251') + socket.inet_aton('0.0.0.0'))
        v4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        v6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        v6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        v6.bind(('::', 5353))
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, socket.inet_pton(socket.AF_INET6, 'ff02::fb') + struct.pack('@I', ifindex))
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex)
        group4, group6 = ('224.0.0.251', 5353), ('ff02::fb', 5353, 0, ifindex)

        state = {'sleep': False, 'remove': False, 'removed': False, 'byes': []}
        signal.signal(signal.SIGUSR1, lambda *_: state.__setitem__('sleep', True))
        signal.signal(signal.SIGUSR2, lambda *_: state.__setitem__('remove', True))
        if kind == 'mac':
            v4.sendto(announce4, group4); v6.sendto(announce6, group6)
        print('ready', flush=True)
        while time.time() < deadline:
            if state['sleep']:
                if kind == 'mac':
                    v4.sendto(bye4, group4); v6.sendto(bye6, group6)
                print('asleep', flush=True)
                sys.exit(0)
            if state['remove']:
                state['remove'], state['removed'] = False, True
                state['byes'] = [time.time(), time.time() + 2, time.time() + 4]
            while state['byes'] and state['byes'][0] <= time.time():
                state['byes'].pop(0)
                v4.sendto(removal, group4); v6.sendto(removal, group6)
                if not state['byes']: print('removed', flush=True)
            try:
                readable, _, _ = select.select([v4, v6], [], [], 0.1)
            except InterruptedError:
                continue
            for sock in readable:
                query, sender = sock.recvfrom(9000)
                if len(query) < 12 or query[2] & 0x80: continue
                lowered = query.lower()
                reply = None
                if own in lowered:
                    reply = answer
                elif kind == 'mac' and not state['removed'] and any(t in lowered for t in types):
                    reply = announce4 if sock is v4 else announce6
                if reply is None: continue
                # A QU question (or one from another port) is answered to the asker, the rest to the group.
                qu = sender[1] != 5353 or first_question_is_qu(query)
                sock.sendto(reply, sender if qu else (group4 if sock is v4 else group6))
        """#

    public init(in host: LabHost, kind: Kind, seconds: Int = 600, logName: String = "responder") throws {
        var arguments = ["/usr/bin/python3", "-c", Self.script]
        switch kind {
        case .macOS15(let capture): arguments += ["mac", "\(seconds)", capture.path]
        case .windows(let name, let address): arguments += ["windows", "\(seconds)", name, address]
        }
        self.process = try host.spawn(arguments, logName: logName)
        guard self.process.waitForOutput("ready", timeout: 10) else {
            throw CommandError("the scripted responder did not start: \(self.process.output)")
        }
    }

    /// It falls asleep: its sleep goodbyes (a Mac's; a PC says nothing), then silence; returns once they left.
    public func sleep() throws {
        kill(self.process.pid, SIGUSR1)
        guard self.process.waitForOutput("asleep", timeout: 10) else {
            throw CommandError("the scripted responder did not say goodbye: \(self.process.output)")
        }
        self.process.stop()
    }

    /// The Mac withdraws its SMB service while awake: the PTR's goodbye three times, 2 s apart; returns after
    /// the last, the responder still running.
    public func removeSMB() throws {
        kill(self.process.pid, SIGUSR2)
        guard self.process.waitForOutput("removed", timeout: 15) else {
            throw CommandError("the scripted responder did not withdraw its service: \(self.process.output)")
        }
    }

    public func stop() { self.process.stop(signal: SIGKILL) }
}
