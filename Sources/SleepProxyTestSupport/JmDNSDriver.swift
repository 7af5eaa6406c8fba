import Foundation

/// JmDNS (Debian's libjmdns-java, the Java stack Android apps embed) as a querier: a small Java program, compiled
/// on first use into the lab's directory, that browses a type, resolves every instance and prints JSON lines.
public enum JmDNSDriver {
    static let source = """
        import javax.jmdns.JmDNS;
        import javax.jmdns.ServiceInfo;
        import java.net.InetAddress;
        import java.util.Enumeration;

        public class SleepProxyJmDNSDriver {
            static String quote(String s) {
                StringBuilder b = new StringBuilder("\\"");
                for (char c : s.toCharArray()) {
                    if (c == '"' || c == '\\\\') b.append('\\\\').append(c);
                    else if (c < 0x20) b.append(String.format("\\\\u%04x", (int) c));
                    else b.append(c);
                }
                return b.append('"').toString();
            }
            public static void main(String[] args) throws Exception {
                InetAddress bind = InetAddress.getByName(args[0]);
                String type = args[1];
                int timeout = Integer.parseInt(args[2]);
                JmDNS jmdns = JmDNS.create(bind, "querier");
                try {
                    for (ServiceInfo info : jmdns.list(type, timeout)) {
                        StringBuilder json = new StringBuilder("{");
                        json.append("\\"name\\":").append(quote(info.getName()));
                        json.append(",\\"server\\":").append(quote(info.getServer() == null ? "" : info.getServer()));
                        json.append(",\\"port\\":").append(info.getPort());
                        json.append(",\\"addresses\\":[");
                        String sep = "";
                        for (String a : info.getHostAddresses()) { json.append(sep).append(quote(a)); sep = ","; }
                        json.append("],\\"txt\\":[");
                        sep = "";
                        for (Enumeration<String> e = info.getPropertyNames(); e.hasMoreElements();) {
                            String key = e.nextElement();
                            String value = info.getPropertyString(key);
                            json.append(sep).append(quote(value == null ? key : key + "=" + value)); sep = ",";
                        }
                        json.append("]}");
                        System.out.println(json);
                    }
                } finally {
                    jmdns.close();
                }
            }
        }
        """

    static let jmdnsJar = "/usr/share/java/jmdns.jar"

    public static var isAvailable: Bool {
        FileManager.default.fileExists(atPath: self.jmdnsJar)
            && FileManager.default.isExecutableFile(atPath: "/usr/bin/javac")
    }

    /// Compiles the driver once per directory.
    static func compile(into directory: URL) throws -> URL {
        let classes = directory.appendingPathComponent("jmdns-driver")
        if FileManager.default.fileExists(atPath: classes.appendingPathComponent("SleepProxyJmDNSDriver.class").path) {
            return classes
        }
        try FileManager.default.createDirectory(at: classes, withIntermediateDirectories: true)
        let file = classes.appendingPathComponent("SleepProxyJmDNSDriver.java")
        try self.source.write(to: file, atomically: true, encoding: .utf8)
        try Command.check(["javac", "-cp", self.jmdnsJar, "-d", classes.path, file.path], timeout: .seconds(120))
        return classes
    }

    /// Browses `type` (e.g. `_http._tcp.local.`) bound to `address` of `host`, resolving every instance.
    public static func browse(
        in host: LabHost, bindAddress: String, type: String, timeoutMilliseconds: Int = 6000, directory: URL
    ) throws -> [ResolvedService] {
        let classes = try self.compile(into: directory)
        let classpath = [self.jmdnsJar, "/usr/share/java/slf4j-api.jar", "/usr/share/java/slf4j-nop.jar", classes.path]
            .filter { FileManager.default.fileExists(atPath: $0) }.joined(separator: ":")
        let result = try host.run(
            ["java", "-cp", classpath, "SleepProxyJmDNSDriver", bindAddress, type, "\(timeoutMilliseconds)"],
            timeout: .seconds(Int64(timeoutMilliseconds / 1000) + 30))
        return result.stdout.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                return nil
            }
            return ResolvedService(
                name: object["name"] as? String ?? "", type: type, host: object["server"] as? String ?? "",
                port: object["port"] as? Int ?? -1, addresses: object["addresses"] as? [String] ?? [],
                txt: object["txt"] as? [String] ?? [])
        }
    }
}
