import NIOCore

/// A whole DNS message: header, question section and the three record sections (RFC 1035 §4.1).
///
/// In an UPDATE (RFC 2136 §2) the same four sections are called zone, prerequisite, update and additional;
/// the aliases below use those names so registration code reads like the RFC. Section counts are not stored:
/// they are the arrays' counts, so a message cannot disagree with its own header.
public struct DNSMessage: Hashable, Sendable {
    /// RFC 6762 §17: "a Multicast DNS packet ... MUST NOT exceed 9000 bytes" (including IP and UDP headers,
    /// so the DNS payload is smaller still). Nothing larger is decoded.
    public static let maximumSize = 9000
    static let headerLength = 12

    public var id: UInt16
    public var flags: DNSHeaderFlags
    public var questions: [DNSQuestion]
    public var answers: [DNSResourceRecord]
    public var authorities: [DNSResourceRecord]
    public var additionals: [DNSResourceRecord]

    public init(
        id: UInt16 = 0,
        flags: DNSHeaderFlags = DNSHeaderFlags(rawValue: 0),
        questions: [DNSQuestion] = [],
        answers: [DNSResourceRecord] = [],
        authorities: [DNSResourceRecord] = [],
        additionals: [DNSResourceRecord] = []
    ) {
        self.id = id
        self.flags = flags
        self.questions = questions
        self.answers = answers
        self.authorities = authorities
        self.additionals = additionals
    }

    // MARK: UPDATE section names (RFC 2136 §2)

    public var zone: [DNSQuestion] {
        get { self.questions }
        set { self.questions = newValue }
    }

    public var prerequisites: [DNSResourceRecord] {
        get { self.answers }
        set { self.answers = newValue }
    }

    public var updates: [DNSResourceRecord] {
        get { self.authorities }
        set { self.authorities = newValue }
    }

    /// The first OPT record of the additional section, if any.
    public var opt: DNSResourceRecord? {
        self.additionals.first { $0.type == .opt }
    }

    /// The options of the first OPT record, or nil when there is none.
    public var ednsOptions: OPTRecord? {
        guard case .opt(let opt) = self.opt?.rdata else { return nil }
        return opt
    }

    // MARK: Decoding

    /// Decodes a message from the readable bytes of `buffer` (the buffer is not consumed).
    public init(decoding buffer: ByteBuffer) throws(WireError) {
        let result: Result<DNSMessage, WireError> = buffer.withUnsafeReadableBytes { raw in
            var reader = ByteReader(raw)
            do throws(WireError) { return .success(try DNSMessage(from: &reader)) } catch { return .failure(error) }
        }
        self = try result.get()
    }

    public init(decoding bytes: [UInt8]) throws(WireError) {
        self = try bytes.withByteReader { (reader: inout ByteReader) throws(WireError) in try DNSMessage(from: &reader)
        }
    }

    /// Decodes a message that did not come from the network, with its own size bound: a host registered in
    /// several UPDATEs holds more than one 9000-byte message's worth of records, and the proxy stores them as one.
    public init(decoding bytes: [UInt8], maximumSize: Int) throws(WireError) {
        self = try bytes.withByteReader { (reader: inout ByteReader) throws(WireError) in
            try DNSMessage(from: &reader, maximumSize: maximumSize)
        }
    }

    init(from reader: inout ByteReader, maximumSize: Int = DNSMessage.maximumSize) throws(WireError) {
        guard reader.remaining <= maximumSize else {
            throw WireError(.tooLarge, at: 0, "message of \(reader.remaining) bytes (limit \(maximumSize))")
        }
        self.id = try reader.readUInt16("ID")
        self.flags = DNSHeaderFlags(rawValue: try reader.readUInt16("flags"))
        let questionCount = Int(try reader.readUInt16("QDCOUNT"))
        let answerCount = Int(try reader.readUInt16("ANCOUNT"))
        let authorityCount = Int(try reader.readUInt16("NSCOUNT"))
        let additionalCount = Int(try reader.readUInt16("ARCOUNT"))
        // Refuse counts the remaining bytes cannot hold before reserving space for them: a 12-byte packet must
        // not make us allocate room for 4 × 65535 entries.
        let needed =
            questionCount * DNSQuestion.minimumWireLength
            + (answerCount + authorityCount + additionalCount) * DNSResourceRecord.minimumWireLength
        guard needed <= reader.remaining else {
            throw WireError(.badCount, at: 4, "section counts need at least \(needed) bytes, \(reader.remaining) left")
        }
        var questions: [DNSQuestion] = []
        questions.reserveCapacity(questionCount)
        for _ in 0..<questionCount { questions.append(try DNSQuestion(from: &reader)) }
        self.questions = questions
        self.answers = try DNSMessage.readRecords(answerCount, from: &reader)
        self.authorities = try DNSMessage.readRecords(authorityCount, from: &reader)
        self.additionals = try DNSMessage.readRecords(additionalCount, from: &reader)
        guard reader.remaining == 0 else {
            throw WireError(.trailingBytes, at: reader.position, "\(reader.remaining) bytes after the last record")
        }
    }

    private static func readRecords(_ count: Int, from reader: inout ByteReader) throws(WireError)
        -> [DNSResourceRecord]
    {
        guard count > 0 else { return [] }
        var records: [DNSResourceRecord] = []
        records.reserveCapacity(count)
        for _ in 0..<count {
            if let record = try DNSResourceRecord.read(from: &reader) { records.append(record) }
        }
        return records
    }

    // MARK: Encoding

    /// Appends the encoded message to `buffer` and returns the number of bytes written.
    @discardableResult
    public func write(to buffer: inout ByteBuffer, options: DNSEncodingOptions = .mdns) -> Int {
        precondition(
            self.questions.count <= 0xFFFF && self.answers.count <= 0xFFFF && self.authorities.count <= 0xFFFF
                && self.additionals.count <= 0xFFFF,
            "a section with more than 65535 entries"
        )
        let written = self.withEncodedBytes(options: options) { buffer.writeBytes($0) }
        return written
    }

    private func withEncodedBytes(options: DNSEncodingOptions, _ body: ([UInt8]) -> Void) -> Int {
        var writer = DNSWriter(options: options)
        writer.writeUInt16(self.id)
        writer.writeUInt16(self.flags.rawValue)
        writer.writeUInt16(UInt16(self.questions.count))
        writer.writeUInt16(UInt16(self.answers.count))
        writer.writeUInt16(UInt16(self.authorities.count))
        writer.writeUInt16(UInt16(self.additionals.count))
        for question in self.questions { question.write(to: &writer) }
        for record in self.answers { record.write(to: &writer) }
        for record in self.authorities { record.write(to: &writer) }
        for record in self.additionals { record.write(to: &writer) }
        body(writer.bytes)
        return writer.bytes.count
    }

    /// The encoded message as bytes.
    public func encoded(options: DNSEncodingOptions = .mdns) -> [UInt8] {
        var result: [UInt8] = []
        _ = self.withEncodedBytes(options: options) { result = $0 }
        return result
    }
}
