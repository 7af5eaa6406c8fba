import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

@Suite("Sleep client service sources")
struct ServiceSourcesTests {
    @Test func commandLineServices() throws {
        let web = try #require(SleepRegistration.Service(specification: "Web._http._tcp:8080"))
        #expect(web.instance == "Web._http._tcp.local." && web.port == 8080 && web.txt == .empty)
        let files = try #require(SleepRegistration.Service(specification: "Büro v1.2 Files._smb._tcp:445:a=b,path=/x"))
        let filesTXT = try TXTRecord(["a=b", "path=/x"])
        #expect(files.instance.labelStrings == ["Büro v1.2 Files", "_smb", "_tcp", "local"] && files.txt == filesTXT)
        #expect(SleepRegistration.Service(specification: "Game._game._udp:7000")?.port == 7000)
        for bad in ["Web._http._tcp", "Web._http._tcp:0", "Web._http._tcp:70000", "Web._http._sctp:80", "_http._tcp:80", "Web.http._tcp:80", "Web._._tcp:80", ":80"] {
            #expect(SleepRegistration.Service(specification: bad) == nil, "\(bad)")
        }
    }

    @Test func avahiBrowseOutputForThisHostOnly() throws {
        let output = """
            +;eth0;IPv4;Sleeper\\032Files;_http._tcp;local
            =;eth0;IPv4;Sleeper\\032Files;_http._tcp;local;sleeper.local;192.0.2.2;8080;"path=/files" "v=1"
            =;eth0;IPv6;Sleeper\\032Files;_http._tcp;local;sleeper.local;fe80::2;8080;"path=/files" "v=1"
            =;eth0;IPv4;Other;_http._tcp;local;other.local;192.0.2.3;80;
            =;eth1;IPv4;Elsewhere;_ssh._tcp;local;sleeper.local;198.51.100.2;22;
            =;eth0;IPv4;Dot\\.ted\\059semi;_ssh._tcp;local;SLEEPER.local;192.0.2.2;22;
            =;eth0;IPv4;Broken;_ssh._tcp;local;sleeper.local;192.0.2.2;notaport;
            =;eth0;IPv4;Short
            """
        let services = AvahiBrowseOutput.services(in: output, hostName: "sleeper.local.", interface: "eth0")
        #expect(services.map { $0.instance.labelStrings } == [["Sleeper Files", "_http", "_tcp", "local"], ["Dot.ted;semi", "_ssh", "_tcp", "local"]])
        let txt = try TXTRecord(["path=/files", "v=1"])
        #expect(services.first?.txt == txt && services.first?.port == 8080)
        #expect(AvahiBrowseOutput.txtStrings(#""a=\"q\"" "b""#) == ["a=\"q\"", "b"])
        #expect(AvahiBrowseOutput.unescape("K\\195\\188che") == "Küche")
    }
}
