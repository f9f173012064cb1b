#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import RingIOBase
import RingIOData

/// A ring's registered buffers and files: sparse tables made with the ring,
/// filled on first use, touched only by the ring thread (the ring is
/// `SINGLE_ISSUER`: every `io_uring_register` call must come from it).
///
/// - Buffers: the shared pool's first `BufferPool.registrableCount` buffers
///   are never freed, so each has a fixed index in every ring's table. A
///   request on one of them registers it on first use (one
///   `io_uring_register_buffers_update_tag`), then goes as `READ_FIXED` /
///   `WRITE_FIXED`: the kernel skips pinning and mapping its pages per request.
/// - Files: a channel's requests carry their fd's `FixedFileSlot`; after
///   `FixedFileSlot.registerAfter` requests the fd gets a slot of the table,
///   if one is free, and later requests use `IOSQE_FIXED_FILE` (no `fget`/`fput`
///   per request). A full table just means plain fds.
final class RingTables {
    private let ring: UnsafeMutablePointer<io_uring>
    /// Buffers: whether index i is registered (empty: buffers not registered).
    private var bufferRegistered: [Bool]
    /// Files: free indices of the table (empty capacity: files not registered).
    private var freeFiles: [Int32]
    let fileCapacity: Int

    let counters = RegistrationCounters()

    /// Runs on the ring thread, right after the ring is set up. A table the
    /// kernel refuses (`ENOMEM`, an old kernel) is simply not used.
    init(ring: UnsafeMutablePointer<io_uring>, buffers: Bool, files: Int) {
        self.ring = ring
        let bufferCount = buffers ? BufferPool.registrableCount : 0
        if bufferCount > 0 && io_uring_register_buffers_sparse(ring, UInt32(bufferCount)) == 0 {
            bufferRegistered = Array(repeating: false, count: bufferCount)
        } else {
            bufferRegistered = []
        }
        if files > 0 && io_uring_register_files_sparse(ring, UInt32(files)) == 0 {
            fileCapacity = files
            freeFiles = (0..<Int32(files)).reversed()
        } else {
            fileCapacity = 0
            freeFiles = []
        }
    }

    /// The table index for a request on `buffer`, registering it first if
    /// needed; `nil`: use a plain read or write.
    func index(for buffer: RegisteredBuffer) -> Int32? {
        let i = Int(buffer.index)
        guard i >= 0 && i < bufferRegistered.count else { return nil }
        if !bufferRegistered[i] {
            var vector = iovec(iov_base: buffer.base, iov_len: buffer.length)
            var tag: UInt64 = 0
            guard io_uring_register_buffers_update_tag(ring, UInt32(i), &vector, &tag, 1) == 1 else {
                // Refused (memory limits): never try this index again.
                bufferRegistered[i] = true
                counters.buffersRefused.add(1, ordering: .relaxed)
                return nil
            }
            bufferRegistered[i] = true
            counters.buffersRegistered.add(1, ordering: .relaxed)
        }
        counters.fixedBufferRequests.add(1, ordering: .relaxed)
        return buffer.index
    }

    /// The table index of `slot`'s fd for a request of `backend`, registering
    /// it once it has been used enough; `nil`: use the plain fd.
    func index(for slot: FixedFileSlot, backend: UringBackend) -> Int32? {
        guard fileCapacity > 0 else { return nil }
        let index = slot.indexForRequest(of: backend) { fd in
            guard let free = freeFiles.popLast() else {
                counters.fileTableFull.add(1, ordering: .relaxed)
                return nil
            }
            var descriptor = fd
            guard io_uring_register_files_update(ring, UInt32(free), &descriptor, 1) == 1 else {
                freeFiles.append(free)
                return nil
            }
            counters.filesRegistered.add(1, ordering: .relaxed)
            return free
        }
        if index != nil { counters.fixedFileRequests.add(1, ordering: .relaxed) }
        return index
    }

    /// A free slot of the file table for a chain's direct descriptor
    /// (`IORequest.Operation.openChained`); `nil` when the table is full.
    func reserveChainSlot() -> Int32? {
        guard let free = freeFiles.popLast() else {
            counters.fileTableFull.add(1, ordering: .relaxed)
            return nil
        }
        return free
    }

    /// Gives back a chain's slot, which the chain's close emptied (or its
    /// open never filled).
    func releaseChainSlot(_ index: Int32) {
        freeFiles.append(index)
    }

    /// Empties slot `index` of the file table and makes it free again.
    func unregisterFile(at index: Int32) -> Int32 {
        var none: Int32 = -1
        let rc = io_uring_register_files_update(ring, UInt32(index), &none, 1)
        freeFiles.append(index)
        counters.filesUnregistered.add(1, ordering: .relaxed)
        return rc < 0 ? rc : 0
    }
}

/// How an engine used its registered tables, for tests and benchmarks.
final class RegistrationCounters: Sendable {
    let buffersRegistered = Atomic<Int>(0)
    let buffersRefused = Atomic<Int>(0)
    let fixedBufferRequests = Atomic<Int>(0)
    let filesRegistered = Atomic<Int>(0)
    let filesUnregistered = Atomic<Int>(0)
    let fileTableFull = Atomic<Int>(0)
    let fixedFileRequests = Atomic<Int>(0)
}

/// An fd's place in one ring's registered-file table.
///
/// The entry of a regular file attaches one to its reads and writes. The
/// first io_uring ring that sees it owns it (channels of the same fd on
/// another engine use the plain fd); once `registerAfter` requests went
/// through that ring, the fd is registered if the table has room. The entry
/// releases it (the ring empties the table slot) before it closes the fd or
/// runs its cleanup handlers, once no request on it is left.
// @unchecked: `fd` is immutable; every `var` is read and written with `lock` held.
package final class FixedFileSlot: @unchecked Sendable {
    /// Requests through a ring before the fd is registered there: one-shot
    /// reads and small files do not pay for the two table updates.
    static let registerAfter = 8

    package let fd: Int32
    private let lock = PlainLock()
    private var owner: ObjectIdentifier?
    private weak var backend: UringBackend?
    private var index: Int32 = -1
    private var uses = 0
    private var tableFull = false
    private var released = false

    package init(fd: Int32) { self.fd = fd }

    /// Ring thread of `backend`: the index to use, registering through
    /// `register` when it is time; `nil` for the plain fd.
    fileprivate func indexForRequest(of backend: UringBackend, register: (Int32) -> Int32?) -> Int32? {
        lock.withLock { () -> Int32? in
            if released { return nil }
            let id = ObjectIdentifier(backend)
            if owner == nil {
                owner = id
                self.backend = backend
            }
            guard owner == id else { return nil }
            if index >= 0 { return index }
            uses += 1
            if tableFull || uses < Self.registerAfter { return nil }
            guard let registered = register(fd) else {
                tableFull = true
                return nil
            }
            index = registered
            return index
        }
    }

    /// Whether the fd is registered now (for tests).
    package var isRegistered: Bool { lock.withLock { index >= 0 } }

    /// No request on the fd is left, and it never had a table slot: it is
    /// released (true: nothing to undo, no closure made). False: nothing
    /// changed; `release(then:)` empties the slot.
    package func releaseIfUnregistered() -> Bool {
        lock.withLock { () -> Bool in
            guard index < 0 || backend == nil else { return false }
            released = true
            return true
        }
    }

    /// No request on the fd is left: empties its table slot, if it has one,
    /// then calls `done` (at once when there is nothing to undo).
    package func release(then done: @escaping @Sendable () -> Void) {
        let (backend, index) = lock.withLock { () -> (UringBackend?, Int32) in
            released = true
            return (self.backend, self.index)
        }
        guard index >= 0, let backend else { return done() }
        backend.submit(IORequest(ringTask: { $0.tables.unregisterFile(at: index) }) { _ in done() })
    }
}
