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

    /// The WS-Discovery messages of the same capture: the PC's Hello at start, a client's Probe for `wsdp:Device`
    /// and the PC's ProbeMatches, a Resolve for its endpoint and the ResolveMatches with its XAddrs.
    public static let wsdHello = Array(
        """
        <?xml version="1.0" encoding="utf-8"?>
        <soap:Envelope xmlns:soap="http://www.w3.org/2003/05/soap-envelope" xmlns:wsa="http://schemas.xmlsoap.org/ws/2004/08/addressing" xmlns:wsd="http://schemas.xmlsoap.org/ws/2005/04/discovery" xmlns:wsx="http://schemas.xmlsoap.org/ws/2004/09/mex" xmlns:wsdp="http://schemas.xmlsoap.org/ws/2006/02/devprof" xmlns:pnpx="http://schemas.microsoft.com/windows/pnpx/2005/10" xmlns:pub="http://schemas.microsoft.com/windows/pub/2005/07">
        <soap:Header>
        <wsa:To>urn:schemas-xmlsoap-org:ws:2005:04:discovery</wsa:To>
        <wsa:Action>http://schemas.xmlsoap.org/ws/2005/04/discovery/Hello</wsa:Action>
        <wsa:MessageID>urn:uuid:b46b5f08-eac2-11f1-8385-025749000002</wsa:MessageID>
        <wsd:AppSequence InstanceId="1795825739" SequenceId="urn:uuid:b46b605c-eac2-11f1-8385-025749000002" MessageNumber="0" />
        </soap:Header>
        <soap:Body>
        <wsd:Hello>
        <wsa:EndpointReference>
        <wsa:Address>urn:uuid:6bd51d6a-0000-4000-8000-025749000002</wsa:Address>
        </wsa:EndpointReference>
        <wsd:XAddrs>http://192.0.2.2:5357/6bd51d6a-0000-4000-8000-025749000002</wsd:XAddrs>
        <wsd:MetadataVersion>1</wsd:MetadataVersion>
        </wsd:Hello>
        </soap:Body>
        </soap:Envelope>
        """.utf8)
    public static let wsdProbe = Array(
        """
        <?xml version="1.0" encoding="utf-8"?>
        <soap:Envelope xmlns:soap="http://www.w3.org/2003/05/soap-envelope" xmlns:wsa="http://schemas.xmlsoap.org/ws/2004/08/addressing" xmlns:wsd="http://schemas.xmlsoap.org/ws/2005/04/discovery" xmlns:wsdp="http://schemas.xmlsoap.org/ws/2006/02/devprof">
        <soap:Header>
        <wsa:To>urn:schemas-xmlsoap-org:ws:2005:04:discovery</wsa:To>
        <wsa:Action>http://schemas.xmlsoap.org/ws/2005/04/discovery/Probe</wsa:Action>
        <wsa:MessageID>urn:uuid:3c1bba69-fe87-4bda-bc76-764f8865819c</wsa:MessageID>
        </soap:Header>
        <soap:Body>
        <wsd:Probe>
        <wsd:Types>wsdp:Device</wsd:Types>
        </wsd:Probe>
        </soap:Body>
        </soap:Envelope>
        """.utf8)
    public static let wsdProbeMatches = Array(
        """
        <?xml version="1.0" encoding="utf-8"?>
        <soap:Envelope xmlns:soap="http://www.w3.org/2003/05/soap-envelope" xmlns:wsa="http://schemas.xmlsoap.org/ws/2004/08/addressing" xmlns:wsd="http://schemas.xmlsoap.org/ws/2005/04/discovery" xmlns:wsx="http://schemas.xmlsoap.org/ws/2004/09/mex" xmlns:wsdp="http://schemas.xmlsoap.org/ws/2006/02/devprof" xmlns:pnpx="http://schemas.microsoft.com/windows/pnpx/2005/10" xmlns:pub="http://schemas.microsoft.com/windows/pub/2005/07">
        <soap:Header>
        <wsa:To>http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous</wsa:To>
        <wsa:Action>http://schemas.xmlsoap.org/ws/2005/04/discovery/ProbeMatches</wsa:Action>
        <wsa:MessageID>urn:uuid:c3264666-eac2-11f1-8385-025749000002</wsa:MessageID>
        <wsa:RelatesTo>urn:uuid:3c1bba69-fe87-4bda-bc76-764f8865819c</wsa:RelatesTo>
        <wsd:AppSequence InstanceId="1795825739" SequenceId="urn:uuid:c3264b20-eac2-11f1-8385-025749000002" MessageNumber="2" />
        </soap:Header>
        <soap:Body>
        <wsd:ProbeMatches>
        <wsd:ProbeMatch>
        <wsa:EndpointReference>
        <wsa:Address>urn:uuid:6bd51d6a-0000-4000-8000-025749000002</wsa:Address>
        </wsa:EndpointReference>
        <wsd:Types>wsdp:Device pub:Computer</wsd:Types>
        <wsd:MetadataVersion>1</wsd:MetadataVersion>
        </wsd:ProbeMatch>
        </wsd:ProbeMatches>
        </soap:Body>
        </soap:Envelope>
        """.utf8)
    public static let wsdResolve = Array(
        """
        <?xml version="1.0" encoding="utf-8"?>
        <soap:Envelope xmlns:soap="http://www.w3.org/2003/05/soap-envelope" xmlns:wsa="http://schemas.xmlsoap.org/ws/2004/08/addressing" xmlns:wsd="http://schemas.xmlsoap.org/ws/2005/04/discovery" xmlns:wsdp="http://schemas.xmlsoap.org/ws/2006/02/devprof">
        <soap:Header>
        <wsa:To>urn:schemas-xmlsoap-org:ws:2005:04:discovery</wsa:To>
        <wsa:Action>http://schemas.xmlsoap.org/ws/2005/04/discovery/Resolve</wsa:Action>
        <wsa:MessageID>urn:uuid:c9ddd672-3764-43b8-8f5f-7535e1b3881c</wsa:MessageID>
        </soap:Header>
        <soap:Body>
        <wsd:Resolve>
        <wsa:EndpointReference>
        <wsa:Address>urn:uuid:6bd51d6a-0000-4000-8000-025749000002</wsa:Address>
        </wsa:EndpointReference>
        </wsd:Resolve>
        </soap:Body>
        </soap:Envelope>
        """.utf8)
    public static let wsdResolveMatches = Array(
        """
        <?xml version="1.0" encoding="utf-8"?>
        <soap:Envelope xmlns:soap="http://www.w3.org/2003/05/soap-envelope" xmlns:wsa="http://schemas.xmlsoap.org/ws/2004/08/addressing" xmlns:wsd="http://schemas.xmlsoap.org/ws/2005/04/discovery" xmlns:wsx="http://schemas.xmlsoap.org/ws/2004/09/mex" xmlns:wsdp="http://schemas.xmlsoap.org/ws/2006/02/devprof" xmlns:pnpx="http://schemas.microsoft.com/windows/pnpx/2005/10" xmlns:pub="http://schemas.microsoft.com/windows/pub/2005/07">
        <soap:Header>
        <wsa:To>http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous</wsa:To>
        <wsa:Action>http://schemas.xmlsoap.org/ws/2005/04/discovery/ResolveMatches</wsa:Action>
        <wsa:MessageID>urn:uuid:c599aa1e-eac2-11f1-8385-025749000002</wsa:MessageID>
        <wsa:RelatesTo>urn:uuid:c9ddd672-3764-43b8-8f5f-7535e1b3881c</wsa:RelatesTo>
        <wsd:AppSequence InstanceId="1795825739" SequenceId="urn:uuid:c599ad3e-eac2-11f1-8385-025749000002" MessageNumber="3" />
        </soap:Header>
        <soap:Body>
        <wsd:ResolveMatches>
        <wsd:ResolveMatch>
        <wsa:EndpointReference>
        <wsa:Address>urn:uuid:6bd51d6a-0000-4000-8000-025749000002</wsa:Address>
        </wsa:EndpointReference>
        <wsd:Types>wsdp:Device pub:Computer</wsd:Types>
        <wsd:XAddrs>http://192.0.2.2:5357/6bd51d6a-0000-4000-8000-025749000002</wsd:XAddrs>
        <wsd:MetadataVersion>1</wsd:MetadataVersion>
        </wsd:ResolveMatch>
        </wsd:ResolveMatches>
        </soap:Body>
        </soap:Envelope>
        """.utf8)

    /// Hex with spaces between groups.
    public static func bytes(_ hex: String) -> [UInt8] {
        let digits = Array(hex.filter { !$0.isWhitespace }.utf8)
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }
}
