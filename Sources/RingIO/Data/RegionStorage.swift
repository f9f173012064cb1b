/// What a `DataChunk` region keeps alive: bytes that stay valid and unchanged
/// while it lives, given back when it goes.
///
/// `DataChunk.Storage` (bytes and a `Deallocator`) is one kind; the engine's
/// read buffers (`ReadBuffer`: pooled, perhaps registered with io_uring) are
/// another, so that a read's buffer becomes the chunk's storage with no
/// second object and no subclass of `Storage`, and a writer reads
/// `registered` back with no dynamic cast. The data layer never looks at
/// `registered`: it only carries it from the engine that made the buffer to
/// the engine that writes it.
package protocol RegionStorage: AnyObject, Sendable {
    /// The bytes.
    var bytes: UnsafeRawBufferPointer { get }
    /// The registered buffer these bytes lie in, if any.
    var registered: RegisteredBuffer? { get }
}

/// A pooled buffer with a fixed place in every ring's registered-buffer
/// table (see the engine's `BufferPool`): index `index`, `length` bytes at `base`.
package struct RegisteredBuffer: @unchecked Sendable {
    // @unchecked: `base` is only an address here; the bytes belong to the
    // request's owner.
    package let index: Int32
    package let base: UnsafeMutableRawPointer
    package let length: Int

    package init(index: Int32, base: UnsafeMutableRawPointer, length: Int) {
        self.index = index
        self.base = base
        self.length = length
    }
}
