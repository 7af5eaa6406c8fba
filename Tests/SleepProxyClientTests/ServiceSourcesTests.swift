import Testing

@testable import SleepProxyClient
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
        for bad in [
            "Web._http._tcp", "Web._http._tcp:0", "Web._http._tcp:70000", "Web._http._sctp:80", "_http._tcp:80",
            "Web.http._tcp:80", "Web._._tcp:80", ":80",
        ] {
            #expect(SleepRegistration.Service(specification: bad) == nil, "\(bad)")
        }
    }
}
