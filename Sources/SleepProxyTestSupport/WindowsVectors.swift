import SleepProxyWire

/// The name-service payloads of a Windows-like PC named WINPC (192.0.2.2, 02:57:49:00:00:02) and a client
/// (192.0.2.3), captured with Samba 4.17's nmbd and an LLMNR responder (docs/windows.md): what the proxy learns
/// from, and what it must answer byte for byte.
public enum WindowsVectors {
    public static let pcMAC = MACAddress("02:57:49:00:00:02")!
    public static let pcV4 = IPAddress("192.0.2.2")!
    public static let clientMAC = MACAddress("02:57:49:00:00:03")!
    public static let clientV4 = IPAddress("192.0.2.3")!

    /// The client's broadcast query for `WINPC<20>` (ID 24774, from port 55849), and the PC's answer.
    /// The client's node-status query to the PC (ID 11944, from port 43578), and the PC's answer (WINPC <00> <03>
    /// <20>, WORKGROUP <00> <1e> as groups, unit ID zeros). The PC's registration of `WINPC<20>`, broadcast at start
    /// and after each resume. The client's LLMNR question for `WINPC` A (ID 34040) and the PC's answer, and its
    /// AAAA question over IPv6.
    public static let nameQuery = bytes(
        "60c601100001000000000000204648454a454f4641454443414341434143414341434143414341434143414341000020" + "0001"
    )
    public static let nameQueryResponse = bytes(
        "60c685800000000100000000204648454a454f4641454443414341434143414341434143414341434143414341000020"
            + "00010003f48000060000c0000202"
    )
    public static let nodeStatusQuery = bytes(
        "2ea80000000100000000000020434b414141414141414141414141414141414141414141414141414141414141000021" + "0001"
    )
    public static let nodeStatusResponse = bytes(
        "2ea88400000000010000000020434b414141414141414141414141414141414141414141414141414141414141000021"
            + "00010000000000890557494e50432020202020202020202000040057494e50432020202020202020202003040057494e"
            + "504320202020202020202020200400574f524b47524f5550202020202020008400574f524b47524f5550202020202020"
            + "1e8400000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" + "00"
    )
    public static let registration = bytes(
        "76c329100001000000000001204648454a454f4641454443414341434143414341434143414341434143414341000020"
            + "0001c00c002000010000000000060000c0000202"
    )
    public static let llmnrQuery = bytes(
        "84f8000000010000000000000557494e50430000010001"
    )
    public static let llmnrResponse = bytes(
        "84f8800000010001000000000557494e50430000010001c00c000100010000001e0004c0000202"
    )
    public static let llmnrQueryAAAA = bytes(
        "f5ba000000010000000000000557494e504300001c0001"
    )

    /// Hex with spaces between groups.
    public static func bytes(_ hex: String) -> [UInt8] {
        let digits = Array(hex.filter { !$0.isWhitespace }.utf8)
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }
}
