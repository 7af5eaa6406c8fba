import Testing

@testable import SleepProxyCore

@Suite("Sleep proxy instance names")
struct SleepProxyNameTests {
    @Test func formatsAndParsesTheAppleForm() throws {
        let appleTV = try #require(SleepProxyName(label: "70-35-60-63.1 Living Room"))
        #expect(
            appleTV.intent == 70 && appleTV.portability == 35 && appleTV.marginalPower == 60 && appleTV.totalPower == 63
        )
        #expect(appleTV.features == 1 && appleTV.niceName == "Living Room")
        #expect(appleTV.metric == 703_560)
        #expect(appleTV.description == "70-35-60-63.1 Living Room")
        let ours = try SleepProxyName(niceName: "Büro NAS")
        #expect(ours.description == "20-40-10-65.0 Büro NAS")
        #expect(ours.metric == 204_010)
        #expect(SleepProxyName(label: ours.description) == ours)
        // UTF-8 and dots in the nice name survive.
        #expect(SleepProxyName(label: "20-35-10-50.0 Wohnzimmer.2")?.niceName == "Wohnzimmer.2")
    }

    @Test func metricsAreTwoDigits() {
        #expect(throws: SleepProxyName.Problem.metricOutOfRange("intent", 9)) {
            try SleepProxyName(intent: 9, niceName: "x")
        }
        #expect(throws: SleepProxyName.Problem.metricOutOfRange("total power", 100)) {
            try SleepProxyName(totalPower: 100, niceName: "x")
        }
        #expect(throws: SleepProxyName.Problem.featureOutOfRange(10)) {
            try SleepProxyName(features: 10, niceName: "x")
        }
        #expect((try? SleepProxyName(intent: 10, totalPower: 99, niceName: "x")) != nil)
    }

    @Test func labelLimitIs63Bytes() throws {
        // "20-40-10-65.0 " is 14 bytes.
        #expect(try SleepProxyName(niceName: String(repeating: "a", count: 49)).description.utf8.count == 63)
        #expect(throws: SleepProxyName.Problem.labelTooLong(64)) {
            try SleepProxyName(niceName: String(repeating: "a", count: 50))
        }
    }

    @Test func malformedAndPrototypeNamesAreUnrankable() {
        for label in [
            "", "70-3", "7x-35-60-63.1 TV", "70-35-6x-63.1 TV", "70_35_60_63.1 TV", "Living Room",
            "20-99-99-99.0 Unconfigured", "xx-99-99-99",
        ] {
            #expect(SleepProxyName.metric(ofLabel: Array(label.utf8)) == SleepProxyName.unrankable, "\(label)")
        }
        // Apple reads characters 6 and 7 without checking them; here they must be digits.
        #expect(SleepProxyName.metric(ofLabel: Array("20-30-::-40.0 Odd".utf8)) == SleepProxyName.unrankable)
        #expect(SleepProxyName(label: "70-35-60-63") == nil)
        #expect(SleepProxyName(label: "70-35-60-63.1Living Room") == nil)
    }

    @Test func rankingIsLowestMetricFirstThenFeatures() {
        let labels = [
            "70-35-60-63.1 Living Room",  // Apple TV: 703560
            "20-35-10-50.0 Büro NAS",  // ours: 203510
            "80-30-77-78.0 iMac",  // 803077
            "20-35-10-40.0 Other NAS",  // 203510, total power differs (ignored)
            "20-35-10-60.1 Keepalive NAS",  // 203510 with keepalive: first among equals
            "junk",
            "20-99-99-99.0 Prototype",
        ]
        #expect(
            SleepProxyName.rank(labels) == [
                "20-35-10-60.1 Keepalive NAS", "20-35-10-40.0 Other NAS", "20-35-10-50.0 Büro NAS",
                "70-35-60-63.1 Living Room", "80-30-77-78.0 iMac",
            ])
        // A feature digit never beats a better metric (Apple's ≥ comparison would let it).
        #expect(
            SleepProxyName.rank(["30-35-10-50.1 Feature", "20-35-10-50.0 Better"]) == [
                "20-35-10-50.0 Better", "30-35-10-50.1 Feature",
            ])
    }
}
