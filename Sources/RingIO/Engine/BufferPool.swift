#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import RingIOBase
import RingIOData

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
///
/// Registered buffers: the first `registrableCount` buffers of the shared
/// pool are permanent (kept when idle, never freed), so each has a fixed
/// index that every io_uring ring can register once and use for
/// `READ_FIXED`/`WRITE_FIXED` (see `RingTables`). The pool hands those out
/// first; the others are ordinary. A buffer, permanent or not, is handed out
/// again only after `give`, which its last `DataChunk` region triggers.
package final class BufferPool: Sendable {
    /// Permanent (registrable) buffers of the shared pool.
    package static let registrableCount = 32

    package let bufferSize: Int
    package let maximumIdle: Int
    private let permanentLimit: Int

    private struct State {
        var idlePermanent: [Int32] = []
        var permanent: [UnsafeMutableRawPointer] = []
        var idle: [UnsafeMutableRawPointer] = []
    }
    private let state: Locked<State>

    init(bufferSize: Int, maximumIdle: Int, permanent: Int = 0) {
        self.bufferSize = bufferSize
        self.maximumIdle = maximumIdle
        self.permanentLimit = permanent
        self.state = Locked(State())
    }

    /// The pool for the channels' 1 MiB requests (`IOChannel.chunkSize`).
    package static let shared = BufferPool(bufferSize: 1 << 20, maximumIdle: 32, permanent: registrableCount)

    /// A buffer of `bufferSize` bytes, reused when one is idle, with its
    /// permanent index (`-1` for an ordinary buffer).
    package func take() -> (UnsafeMutableRawPointer, Int32) {
        let reused = state.withLock { s -> (UnsafeMutableRawPointer, Int32)? in
            if let slot = s.idlePermanent.popLast() { return (s.permanent[Int(slot)], slot) }
            if let p = s.idle.popLast() { return (p, -1) }
            return nil
        }
        if let reused { return reused }
        var p: UnsafeMutableRawPointer?
        let rc = posix_memalign(&p, 4096, bufferSize)
        precondition(rc == 0 && p != nil, "RingIO: out of memory allocating a \(bufferSize)-byte buffer")
        return state.withLock { s in
            if s.permanent.count < permanentLimit {
                s.permanent.append(p!)
                return (p!, Int32(s.permanent.count - 1))
            }
            return (p!, -1)
        }
    }

    /// Gives a buffer back (`slot`: what `take` returned with it).
    package func give(_ p: UnsafeMutableRawPointer, slot: Int32) {
        let keep = state.withLock { s -> Bool in
            if slot >= 0 {
                s.idlePermanent.append(slot)
                return true
            }
            if s.idle.count < maximumIdle {
                s.idle.append(p)
                return true
            }
            return false
        }
        if !keep { free(p) }
    }
}

/// A read buffer: a pooled buffer, a reused 4 KiB block (`SmallBlocks`), or
/// an exactly sized allocation for a small request. It is itself the storage of the chunk its bytes become (a
/// `RegionStorage`: no second object per read), and gives its bytes back, to
/// the pool, to `SmallBlocks` or to `free`, when the last region referring to it is gone.
// @unchecked: the bytes are written only by the one request in flight on
// them, before any chunk refers to them; a chunk is made only after that
// request's completion, which the operation observes under its lock. After
// that the bytes are never written again.
package final class ReadBuffer: RegionStorage, @unchecked Sendable {
    package let bytes: UnsafeRawBufferPointer
    package let pool: BufferPool?
    /// The buffer's index in the rings' registered-buffer tables, if it has one.
    package let registered: RegisteredBuffer?

    /// Read-budget bytes this buffer holds (`ReadBudget`): given back when
    /// its bytes are handed on as a chunk, or when it is freed unused.
    private let budget: ReadBudget?
    private let charge: Atomic<Int>
    /// The bytes are a `SmallBlocks` block.
    private let small: Bool
    /// The read these bytes were read for, while its chunks wait in write
    /// queues (`ReadAheadHold`); `nil` for reads that need none.
    package let hold: ReadAheadHold?

    /// Whether a buffer for `capacity` bytes comes from `pool` (see `init`).
    package static func usesPool(capacity: Int, pool: BufferPool?, alignment: Int) -> Bool {
        guard let pool else { return false }
        return capacity <= pool.bufferSize && capacity >= pool.bufferSize / 8 && alignment <= 4096
    }

    /// The bytes a buffer for `capacity` bytes allocates: what it takes
    /// from a `ReadBudget`.
    package static func footprint(capacity: Int, pool: BufferPool?, alignment: Int) -> Int {
        if usesPool(capacity: capacity, pool: pool, alignment: alignment) { return pool!.bufferSize }
        return SmallBlocks.fits(capacity: capacity, alignment: alignment) ? SmallBlocks.size : Swift.max(capacity, 1)
    }

    /// A request of at least an eighth of the pool's buffer size reads into
    /// a pooled buffer (already faulted in, perhaps registered); one of at most
    /// 4 KiB with no alignment into a reused `SmallBlocks` block; any other
    /// into an exactly sized allocation (`alignment`: for direct I/O; the
    /// pool's buffers are page-aligned). `charge`: bytes taken from `budget`
    /// for it.
    package init(capacity: Int, pool: BufferPool?, alignment: Int = 0, budget: ReadBudget? = nil, charge: Int = 0,
                 hold: ReadAheadHold? = nil) {
        self.hold = hold
        self.budget = budget
        self.charge = Atomic(budget == nil ? 0 : charge)
        var taken: (UnsafeMutableRawPointer, Int32)?
        if let pool, Self.usesPool(capacity: capacity, pool: pool, alignment: alignment) {
            taken = pool.take()
        }
        self.pool = taken == nil ? nil : pool
        small = taken == nil && SmallBlocks.fits(capacity: capacity, alignment: alignment)
        let pointer: UnsafeMutableRawPointer
        if let (p, slot) = taken {
            pointer = p
            registered = slot >= 0 ? RegisteredBuffer(index: slot, base: p, length: pool!.bufferSize) : nil
        } else if alignment > 0 {
            var p: UnsafeMutableRawPointer?
            let rc = posix_memalign(&p, Swift.max(alignment, MemoryLayout<Int>.size), Swift.max(capacity, 1))
            precondition(rc == 0 && p != nil, "RingIO: out of memory allocating a \(capacity)-byte buffer")
            pointer = p!
            registered = nil
        } else if small {
            pointer = SmallBlocks.take()
            registered = nil
        } else {
            pointer = malloc(Swift.max(capacity, 1))!
            registered = nil
        }
        bytes = UnsafeRawBufferPointer(start: pointer, count: capacity)
    }

    deinit {
        let pointer = UnsafeMutableRawPointer(mutating: bytes.baseAddress!)
        if let pool {
            pool.give(pointer, slot: registered?.index ?? -1)
        } else if small {
            SmallBlocks.give(pointer)
        } else {
            free(pointer)
        }
        releaseBudget()
    }

    /// Gives the buffer's read-budget bytes back (once).
    private func releaseBudget() {
        let bytes = charge.exchange(0, ordering: .relaxed)
        if bytes > 0 { budget?.give(bytes) }
    }

    /// Where a request writes.
    package var pointer: UnsafeMutableRawPointer { UnsafeMutableRawPointer(mutating: bytes.baseAddress!) }

    /// A chunk of the first `count` bytes, once the last request on them
    /// completed. A pooled buffer that is mostly empty is copied out, so that
    /// it goes back to the pool as soon as the request's slot lets go of it;
    /// otherwise the chunk refers to this buffer (no copy).
    package func chunk(count: Int) -> DataChunk {
        chunk(range: 0..<count)
    }

    /// A chunk of the bytes in `range` (direct I/O delivers the part of the
    /// aligned blocks the user asked for), on the same terms.
    package func chunk(range: Range<Int>) -> DataChunk {
        // The read is over and its bytes are handed on: what the budget
        // bounds (bytes of reads not yet delivered) no longer includes them.
        releaseBudget()
        guard !range.isEmpty else { return .empty }
        if let pool, range.count < pool.bufferSize / 8 {
            return DataChunk(copying: UnsafeRawBufferPointer(start: bytes.baseAddress! + range.lowerBound,
                                                             count: range.count))
        }
        return DataChunk(storage: self, range: range)
    }
}
