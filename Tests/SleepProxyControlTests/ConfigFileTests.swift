import SleepProxyControl
import Testing

@Suite("Configuration file")
struct ConfigFileTests {
    static let settings: [String: ConfigFile.Kind] = ["interface": .repeated, "log-level": .single, "wake-udp": .flag]

    @Test func settingsCommentsBlankLinesAndRepeats() throws {
        let text = """
            # sleep-proxy
            interface = eth0   # the wired port
            interface=eth0.10

            log-level = "info"
            wake-udp = yes
            """
        let entries = try ConfigFile.parse(text, settings: Self.settings)
        #expect(entries.map(\.key) == ["interface", "interface", "log-level", "wake-udp"])
        #expect(entries.map(\.value) == ["eth0", "eth0.10", "info", "yes"])
        #expect(entries.map(\.line) == [2, 3, 5, 6])
        #expect(
            entries.flatMap { ConfigFile.arguments(for: $0, kind: Self.settings[$0.key]!) } == [
                "--interface=eth0", "--interface=eth0.10", "--log-level=info", "--wake-udp",
            ])
        #expect(
            ConfigFile.arguments(for: ConfigFile.Entry(key: "wake-udp", value: "off", line: 1), kind: .flag).isEmpty)
    }

    @Test func everyProblemNamesItsLine() {
        func problem(_ text: String) -> ConfigFile.Problem? {
            do {
                _ = try ConfigFile.parse(text, settings: Self.settings)
                return nil
            } catch {
                return error
            }
        }
        #expect(problem("interface = eth0\nbogus = 1")?.line == 2)
        #expect(problem("interface = eth0\nbogus = 1")?.message.hasPrefix("unknown setting \"bogus\"") == true)
        #expect(problem("\n\nlog-level")?.description == "line 3: expected \"setting = value\", found \"log-level\"")
        #expect(
            problem("log-level = info\nlog-level = debug")?.description == "line 2: log-level is already set on line 1")
        #expect(problem("wake-udp = maybe")?.description == "line 1: wake-udp takes true or false, not \"maybe\"")
        #expect(problem("log-level =   ")?.description == "line 1: log-level needs a value")
    }

    @Test func durationsForPeople() {
        #expect(HumanDuration.format(45) == "45s")
        #expect(HumanDuration.format(125) == "2m 5s")
        #expect(HumanDuration.format(7260) == "2h 1m")
        #expect(HumanDuration.format(90000) == "1d 1h")
        #expect(
            HumanDuration.parse("15m") == 900 && HumanDuration.parse("2h") == 7200 && HumanDuration.parse("90") == 90)
        #expect(HumanDuration.parse("soon") == nil && HumanDuration.parse("-5m") == nil)
    }
}
