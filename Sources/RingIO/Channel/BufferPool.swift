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

    /// The number of idle buffers (for tests).
    var idleCount: Int { idle.withLock { $0.count } }
}

/// A read buffer: a pooled buffer, or an exactly sized allocation for a small
/// request. Owned by one request at a time until it becomes a chunk's storage.
// @unchecked: the bytes are written only by the one request in flight on
// them; they are read (turned into a chunk) only after that request's
// completion, which the operation observes under its lock.
final class ReadBuffer: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer
    let capacity: Int
    let pool: BufferPool?
    /// Set once the bytes have been handed to a chunk's storage.
    private var handedOver = false

    init(capacity: Int, pool: BufferPool?) {
        self.capacity = capacity
        if let pool, capacity == pool.bufferSize {
            self.pool = pool
            self.pointer = pool.take()
        } else {
            self.pool = nil
            self.pointer = malloc(Swift.max(capacity, 1))!
        }
    }

    deinit {
        guard !handedOver else { return }
        if let pool { pool.give(pointer) } else { free(pointer) }
    }

    /// A chunk of the first `count` bytes. Pooled buffers that are mostly
    /// empty are copied out and returned at once; otherwise the buffer itself
    /// becomes the chunk's storage (no copy). Call once, after the last
    /// request on this buffer completed.
    func chunk(count: Int) -> DataChunk {
        guard count > 0 else { return .empty }
        if let pool, count < pool.bufferSize / 8 {
            return DataChunk(copying: UnsafeRawBufferPointer(start: pointer, count: count))
        }
        handedOver = true
        let storage: DataChunk.Storage
        if let pool {
            storage = PooledStorage(bytes: UnsafeRawBufferPointer(start: pointer, count: capacity), pool: pool)
        } else {
            storage = DataChunk.Storage(bytes: UnsafeRawBufferPointer(start: pointer, count: capacity), deallocator: .free)
        }
        return DataChunk(storage: storage, range: 0..<count)
    }
}

/// A chunk storage that returns its buffer to a pool instead of freeing it.
final class PooledStorage: DataChunk.Storage, @unchecked Sendable {
    // @unchecked: `pool` is immutable; the bytes are never written after the
    // read that filled them completed.
    let pool: BufferPool

    init(bytes: UnsafeRawBufferPointer, pool: BufferPool) {
        self.pool = pool
        super.init(bytes: bytes, deallocator: .none)
    }

    deinit {
        pool.give(UnsafeMutableRawPointer(mutating: bytes.baseAddress!))
    }
}
