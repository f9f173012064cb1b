#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Page-aligned read buffers of one size, kept for reuse.
///
/// A long copy reads into the same few buffers over and over instead of
/// faulting in fresh pages for every chunk (DispatchIO allocates a new buffer
/// per chunk: about 263,000 minor faults per GiB). A buffer goes back to the
/// pool when the last `DataChunk` region referring to it is released; at most
/// `maximumIdle` idle buffers are kept, the rest are freed.
///
/// What a region pins: a read that fills a large part of a pooled buffer
/// hands the buffer itself to the chunk (no copy), so the chunk keeps the
/// whole buffer until it is released. A read that fills less than an eighth
/// of it (a short pipe or socket read, the tail of a file) is copied into an
/// exactly sized allocation and the buffer goes straight back to the pool:
/// a few bytes never pin a megabyte.
final class BufferPool: Sendable {
    let bufferSize: Int
    let maximumIdle: Int
    private let idle: Locked<[UnsafeMutableRawPointer]>

    init(bufferSize: Int, maximumIdle: Int) {
        self.bufferSize = bufferSize
        self.maximumIdle = maximumIdle
        self.idle = Locked([])
    }

    /// The pool for the channels' 1 MiB requests.
    static let shared = BufferPool(bufferSize: IOChannel.chunkSize, maximumIdle: 32)

    /// A buffer of `bufferSize` bytes, reused when one is idle.
    func take() -> UnsafeMutableRawPointer {
        if let p = idle.withLock({ $0.popLast() }) { return p }
        var p: UnsafeMutableRawPointer?
        let rc = posix_memalign(&p, 4096, bufferSize)
        precondition(rc == 0 && p != nil, "RingIO: out of memory allocating a \(bufferSize)-byte buffer")
        return p!
    }

    /// Gives a buffer back.
    func give(_ p: UnsafeMutableRawPointer) {
        let keep = idle.withLock { list -> Bool in
            if list.count < maximumIdle {
                list.append(p)
                return true
            }
            return false
        }
        if !keep { free(p) }
    }
}

/// A read buffer: a pooled buffer, or an exactly sized allocation for a small
/// request. It is itself the storage of the chunk its bytes become (no second
/// object per read), and gives its bytes back, to the pool or to `free`, when
/// the last region referring to it is gone.
// @unchecked: the bytes are written only by the one request in flight on
// them, before any chunk refers to them; a chunk is made only after that
// request's completion, which the operation observes under its lock. After
// that the bytes are never written again.
final class ReadBuffer: DataChunk.Storage, @unchecked Sendable {
    let pool: BufferPool?

    init(capacity: Int, pool: BufferPool?) {
        let usePool = pool.map { capacity == $0.bufferSize } ?? false
        self.pool = usePool ? pool : nil
        let pointer = usePool ? pool!.take() : malloc(Swift.max(capacity, 1))!
        super.init(bytes: UnsafeRawBufferPointer(start: pointer, count: capacity), deallocator: .none)
    }

    deinit {
        let pointer = UnsafeMutableRawPointer(mutating: bytes.baseAddress!)
        if let pool { pool.give(pointer) } else { free(pointer) }
    }

    /// Where a request writes.
    var pointer: UnsafeMutableRawPointer { UnsafeMutableRawPointer(mutating: bytes.baseAddress!) }

    /// A chunk of the first `count` bytes, once the last request on them
    /// completed. A pooled buffer that is mostly empty is copied out, so that
    /// it goes back to the pool as soon as the request's slot lets go of it;
    /// otherwise the chunk refers to this buffer (no copy).
    func chunk(count: Int) -> DataChunk {
        guard count > 0 else { return .empty }
        if let pool, count < pool.bufferSize / 8 {
            return DataChunk(copying: UnsafeRawBufferPointer(start: bytes.baseAddress, count: count))
        }
        return DataChunk(storage: self, range: 0..<count)
    }
}
