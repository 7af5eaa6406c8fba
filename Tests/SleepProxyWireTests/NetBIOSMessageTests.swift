import SleepProxyTestSupport
import Testing

@testable import SleepProxyWire

/// The NetBIOS name service codec against the packets of a real nmbd and its clients (docs/windows.md).
@Suite("NetBIOS name service codec")
struct NetBIOSMessageTests {
    static let winpc20 = NetBIOSName("WINPC", suffix: 0x20)!

    @Test func firstLevelEncodingIsRFC1001s() {
        #expect(String(decoding: Self.winpc20.firstLevelEncoded, as: UTF8.self) == "FHEJEOFAEDCACACACACACACACACACACA")
        #expect(NetBIOSName(firstLevelEncoded: Self.winpc20.firstLevelEncoded) == Self.winpc20)
        #expect(NetBIOSName("winpc", suffix: 0x20) == Self.winpc20, "names compare upper-cased")
        #expect(Self.winpc20.description == "WINPC<20>")
        #expect(NetBIOSName(String(repeating: "A", count: 15), suffix: 0) != nil)
        #expect(NetBIOSName(String(repeating: "A", count: 16), suffix: 0) == nil)
        #expect(NetBIOSName("", suffix: 0) == nil)
    }

    @Test func capturedPacketsDecode() throws {
        let query = try NetBIOSMessage(decoding: WindowsVectors.nameQuery)
        #expect(query.id == 24774 && !query.isResponse && query.isBroadcast && query.opcode == .query)
        #expect(query.questions == [NetBIOSMessage.Question(name: Self.winpc20, type: NetBIOSMessage.typeNB)])

        let registration = try NetBIOSMessage(decoding: WindowsVectors.registration)
        #expect(registration.opcode == .registration)
        // Its additional record names the question's name through a pointer.
        #expect(registration.additionals.first?.name == Self.winpc20)
        #expect(registration.additionals.first?.addressEntries?.first?.address == IPv4Address("192.0.2.2"))

        let status = try #require(try NetBIOSMessage(decoding: WindowsVectors.nodeStatusResponse).nodeStatus)
        #expect(
            status.names.map(\.name.description) == [
                "WINPC<00>", "WINPC<03>", "WINPC<20>", "WORKGROUP<00>", "WORKGROUP<1e>",
            ])
        #expect(status.names.map(\.isGroup) == [false, false, false, true, true])
        #expect(status.statistics.count == NetBIOSMessage.statisticsLength)
    }

    @Test func answersAreByteForByteThePCs() throws {
        let query = try NetBIOSMessage(decoding: WindowsVectors.nameQuery)
        let answer = NetBIOSMessage.nameQueryResponse(
            to: query, name: Self.winpc20, ttl: 259_200, nbFlags: 0, address: IPv4Address("192.0.2.2")!)
        #expect(answer.encoded() == WindowsVectors.nameQueryResponse)

        let statusQuery = try NetBIOSMessage(decoding: WindowsVectors.nodeStatusQuery)
        let status = try #require(try NetBIOSMessage(decoding: WindowsVectors.nodeStatusResponse).nodeStatus)
        let statusAnswer = NetBIOSMessage.nodeStatusResponse(
            to: statusQuery, names: status.names, statistics: status.statistics)
        #expect(statusAnswer.encoded() == WindowsVectors.nodeStatusResponse)
        #expect(NetBIOSMessage.nodeStatusQuery(id: 11944).encoded() == WindowsVectors.nodeStatusQuery)
    }

    static let malformed: [(String, [UInt8])] = {
        let query = WindowsVectors.nameQuery
        let header = Array(query.prefix(12))
        var cases: [(String, [UInt8])] = []
        cases.append(("empty", []))
        cases.append(("header only, a question promised", header))
        cases.append(("truncated name", Array(query.prefix(30))))
        cases.append(("trailing byte", query + [0]))
        let label31: [UInt8] = [31] + [UInt8](repeating: 0x41, count: 31) + [0, 0, 0x20, 0, 1]
        cases.append(("label of 31", header + label31))
        var pastP = query
        pastP[13] = 0x5A
        cases.append(("character past P", pastP))
        let scope: [UInt8] = [3, 0x6C, 0x61, 0x6E, 0, 0, 0x20, 0, 1]
        cases.append(("a scope", Array(query.prefix(45)) + scope))
        cases.append(("pointer forwards", header + [0xC0, 0x20, 0, 0x20, 0, 1]))
        cases.append(("count past the bytes", [0, 0, 0, 0, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0]))
        cases.append(("too large", [UInt8](repeating: 0, count: NetBIOSMessage.maximumSize + 1)))
        return cases
    }()

    @Test(arguments: malformed)
    func malformedInputThrows(_ label: String, _ bytes: [UInt8]) {
        #expect(throws: WireError.self, "\(label)") { try NetBIOSMessage(decoding: bytes) }
    }

    @Test func theSizeBoundIsExact() throws {
        // N bytes decode (a valid query padded by an additional record filling it), N + 1 do not.
        var message = try NetBIOSMessage(decoding: WindowsVectors.nameQuery)
        let room = NetBIOSMessage.maximumSize - WindowsVectors.nameQuery.count - (34 + 10)
        message.additionals = [
            NetBIOSMessage.Record(name: Self.winpc20, type: 0x20, ttl: 0, rdata: Array(repeating: 0, count: room))
        ]
        let bytes = message.encoded()
        #expect(bytes.count == NetBIOSMessage.maximumSize)
        #expect(try NetBIOSMessage(decoding: bytes).additionals.count == 1)
        message.additionals[0].rdata.append(0)
        #expect(throws: WireError.self) { try NetBIOSMessage(decoding: message.encoded()) }
    }
}
