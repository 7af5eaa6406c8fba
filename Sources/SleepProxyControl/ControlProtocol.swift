import FoundationEssentials

/// The admin protocol between `sleepproxyd` and `sleepproxyctl`: one JSON object per line over a Unix socket.
///
/// Lines keep the framing trivial to read with `socat` or `nc -U` when debugging, and a version number lets a
/// newer CLI tell an older daemon's answer apart instead of misreading it.
public enum ControlProtocol {
    /// Bumped on every change a client cannot ignore.
    public static let version = 1
    /// A request or response line longer than this is refused: a local peer must not make the daemon buffer
    /// without bound.
    public static let maximumLineLength = 1 << 20

    public enum FramingError: Error, Equatable, Sendable {
        case lineTooLong(Int)
    }

    /// Encodes one value as a single line (JSON never contains a raw newline).
    public static func frame<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return Array(try encoder.encode(value)) + [0x0A]
    }

    /// Splits complete lines off the front of `buffer`, leaving a trailing partial line in place.
    public static func takeLines(from buffer: inout [UInt8]) throws(FramingError) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        var start = 0
        for index in buffer.indices where buffer[index] == 0x0A {
            lines.append(Array(buffer[start..<index]))
            start = index + 1
        }
        buffer.removeFirst(start)
        if buffer.count > maximumLineLength { throw .lineTooLong(buffer.count) }
        for line in lines where line.count > maximumLineLength { throw .lineTooLong(line.count) }
        return lines
    }

    public static func decode<T: Decodable>(_ type: T.Type, from line: [UInt8]) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(type, from: Data(line))
    }
}
