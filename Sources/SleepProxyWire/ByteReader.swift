/// A bounds-checked cursor over bytes that are only valid inside a `withUnsafeBytes` closure.
///
/// Every read checks `limit` and throws `WireError.truncated` with the offset of the field that did not fit,
/// so decoders written on top of it cannot read out of bounds whatever the input says. `limit` can be narrowed
/// (RDATA is decoded inside its RDLENGTH window) while `bytes` keeps the whole message, so DNS compression
/// pointers can still reach earlier names.
@usableFromInline
struct ByteReader {
    @usableFromInline let bytes: UnsafeRawBufferPointer
    @usableFromInline var position: Int
    @usableFromInline var limit: Int

    @inlinable
    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
        self.position = 0
        self.limit = bytes.count
    }

    @inlinable
    var remaining: Int { self.limit - self.position }

    @inlinable
    func require(_ count: Int, _ what: StaticString) throws(WireError) {
        guard count >= 0, count <= self.limit - self.position else {
            throw WireError(.truncated, at: self.position, "\(what) needs \(count) bytes, \(self.remaining) left")
        }
    }

    @inlinable
    mutating func readUInt8(_ what: StaticString) throws(WireError) -> UInt8 {
        try self.require(1, what)
        let value = self.bytes[self.position]
        self.position += 1
        return value
    }

    @inlinable
    mutating func readUInt16(_ what: StaticString) throws(WireError) -> UInt16 {
        try self.require(2, what)
        let value = UInt16(self.bytes[self.position]) << 8 | UInt16(self.bytes[self.position + 1])
        self.position += 2
        return value
    }

    @inlinable
    mutating func readUInt32(_ what: StaticString) throws(WireError) -> UInt32 {
        try self.require(4, what)
        var value: UInt32 = 0
        for i in 0..<4 { value = value << 8 | UInt32(self.bytes[self.position + i]) }
        self.position += 4
        return value
    }

    @inlinable
    mutating func readBytes(_ count: Int, _ what: StaticString) throws(WireError) -> [UInt8] {
        try self.require(count, what)
        let start = self.position
        self.position += count
        return Array(self.bytes[start..<start + count])
    }

    @inlinable
    mutating func skip(_ count: Int, _ what: StaticString) throws(WireError) {
        try self.require(count, what)
        self.position += count
    }

    /// Runs `body` with `limit` narrowed to `count` bytes from here, then requires that `body` consumed all of
    /// them: a length field and its contents must agree exactly.
    @inlinable
    mutating func withWindow<T>(
        _ count: Int,
        _ what: StaticString,
        _ body: (inout ByteReader) throws(WireError) -> T
    ) throws(WireError) -> T {
        try self.require(count, what)
        let savedLimit = self.limit
        let end = self.position + count
        self.limit = end
        // Restored on every exit, so a caller that recovers from an error inside the window keeps reading.
        defer { self.limit = savedLimit }
        let value = try body(&self)
        guard self.position == end else {
            throw WireError(.trailingBytes, at: self.position, "\(what) has \(end - self.position) unused bytes")
        }
        return value
    }
}

extension Array where Element == UInt8 {
    /// Runs a decoder over the array's bytes.
    @inlinable
    func withByteReader<T>(_ body: (inout ByteReader) throws(WireError) -> T) throws(WireError) -> T {
        let result: Result<T, WireError> = self.withUnsafeBytes { raw in
            var reader = ByteReader(raw)
            do throws(WireError) { return .success(try body(&reader)) } catch { return .failure(error) }
        }
        return try result.get()
    }
}
