import NIOCore

extension ByteBuffer {
    /// Runs a decoder over the readable bytes; offsets in thrown errors count from `readerIndex`.
    @inlinable
    func decode<T>(_ body: (inout ByteReader) throws(WireError) -> T) throws(WireError) -> T {
        let result: Result<T, WireError> = self.withUnsafeReadableBytes { raw in
            var reader = ByteReader(raw)
            do throws(WireError) { return .success(try body(&reader)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// The readable bytes from `offset` (relative to `readerIndex`) for `length` bytes, without copying.
    @inlinable
    func slice(from offset: Int, length: Int) -> ByteBuffer {
        self.getSlice(at: self.readerIndex + offset, length: length)!
    }
}
