#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import RingIOBase
import RingIOData

/// One system call handed to an `IOEngine`: the request interface that
/// channels and the one-shot functions are built on.
///
/// It is SPI (`@_spi(Engine) import RingIO`) for the demo, the benchmarks and
/// programs that want raw requests; its shape may change between releases.
///
/// The memory a request points at (buffers, iovecs, paths, statx results) is
/// owned by `owner`, which the engine keeps alive until the request's
/// completion has run, also when the request was cancelled: the kernel may
/// still be writing into a buffer until its CQE arrives.
///
/// `completion` receives the raw result, as a CQE's `res`: a non-negative
/// value on success (bytes moved, a file descriptor, 0) or `-errno`. It runs
/// on the engine's thread (the ring thread or a pool worker), so it must be
/// short and must not block: channels use it to hand results to an `IOQueue`.
@_spi(Engine)
// @unchecked: `operation`, `owner`, `closure`, `target` and `tag` are immutable after
// init. `engineState` and `worker` are touched only by the engine that
// owns the request: by the ring thread (io_uring backend) or under the
// pool's lock (thread-pool backend).
public final class IORequest: @unchecked Sendable {

    public enum Operation {
        /// The corresponding io_uring operation is `IORING_OP_NOP`.
        case nop
        /// `offset == -1` reads at the file position. `IORING_OP_READ`.
        case read(fd: Int32, buffer: UnsafeMutableRawBufferPointer, offset: Int64)
        /// `IORING_OP_READV`.
        case readv(fd: Int32, iovecs: UnsafePointer<iovec>, count: Int, offset: Int64)
        /// `offset == -1` writes at the file position. `IORING_OP_WRITE`.
        case write(fd: Int32, buffer: UnsafeRawBufferPointer, offset: Int64)
        /// `IORING_OP_WRITEV`.
        case writev(fd: Int32, iovecs: UnsafePointer<iovec>, count: Int, offset: Int64)
        /// `IORING_OP_OPENAT`.
        case openat(directory: Int32, path: UnsafePointer<CChar>, flags: Int32, mode: UInt32)
        /// `IORING_OP_STATX`.
        case statx(directory: Int32, path: UnsafePointer<CChar>, flags: Int32, mask: UInt32,
                   buffer: UnsafeMutablePointer<cliburing_statx_t>)
        /// `IORING_OP_CLOSE`.
        case close(fd: Int32)
        /// `IORING_OP_FSYNC` (with `IORING_FSYNC_DATASYNC` when `dataOnly`).
        case fsync(fd: Int32, dataOnly: Bool)
        /// Waits until `fd` is ready for `events` (`POLLIN`, `POLLOUT`);
        /// completes with the ready events. `IORING_OP_POLL_ADD`.
        case poll(fd: Int32, events: UInt32)
        /// `IORING_OP_RENAMEAT` (`renameat2` with `flags`, e.g. `RENAME_NOREPLACE`).
        case renameat(oldDirectory: Int32, oldPath: UnsafePointer<CChar>,
                      newDirectory: Int32, newPath: UnsafePointer<CChar>, flags: UInt32)
        /// `IORING_OP_UNLINKAT` (`AT_REMOVEDIR` in `flags` removes a directory).
        case unlinkat(directory: Int32, path: UnsafePointer<CChar>, flags: Int32)
        /// Moves up to `length` bytes between two fds, one of them a pipe,
        /// inside the kernel; an offset of -1 means the fd's position (and
        /// must be -1 for the pipe). `IORING_OP_SPLICE`.
        case splice(input: Int32, inputOffset: Int64, output: Int32, outputOffset: Int64, length: Int)
        /// Opens `path` into `file`, for the later requests of the same
        /// linked chain; `res` is 0. On io_uring a direct descriptor (a slot
        /// of the ring's registered-file table, taken when the chain enters
        /// the SQ): `IORING_OP_OPENAT` with a file index. `flags` must not
        /// hold `O_CLOEXEC` (a direct descriptor has no such flag).
        /// Only where `IOEngine.supportsChainedFiles`.
        case openChained(directory: Int32, path: UnsafePointer<CChar>, flags: Int32, mode: UInt32, file: ChainedFile)
        /// A read of the file an earlier `openChained` of the chain opened:
        /// `IORING_OP_READ` with `IOSQE_FIXED_FILE`.
        case readChained(file: ChainedFile, buffer: UnsafeMutableRawBufferPointer, offset: Int64)
        /// A regular fd (`O_CLOEXEC`) for `file`, which the completion owns:
        /// `IORING_OP_FIXED_FD_INSTALL`.
        case installChained(file: ChainedFile)
        /// Closes `file` (its table slot is free again after the completion):
        /// `IORING_OP_CLOSE` with a file index.
        case closeChained(file: ChainedFile)
        /// Cancels `target`: `IORING_OP_ASYNC_CANCEL` on the ring, or an
        /// interrupted wait in the pool. Made by `IOEngine.cancel(_:)`.
        case cancel(target: IORequest)
        /// Watches `fd` for `events` (`POLLIN`, `POLLOUT`) and keeps
        /// watching: each time the fd becomes ready the request's `shot`
        /// runs with the ready events, and the request stays in flight. It
        /// may end at any time with a final completion (the ready events, or
        /// `-errno`, `-ECANCELED` after `IOEngine.cancel`); a caller that
        /// still wants events submits a new one. Kernels before 5.13 (no
        /// multishot poll) and the thread-pool backend (its readiness loop,
        /// one thread for every watch) end it after each readiness, so the
        /// caller re-arms each time. The corresponding io_uring operation is
        /// `IORING_OP_POLL_ADD` with `IORING_POLL_ADD_MULTI`.
        case pollMultishot(fd: Int32, events: UInt32)
        /// Completes with `-ETIME` at `deadline`, an absolute time of
        /// `CLOCK_BOOTTIME` (`CLOCK_MONOTONIC` where the kernel lacks
        /// `IORING_TIMEOUT_BOOTTIME`, before 5.15: see
        /// `IOEngine.timeoutClock`), or with `-ECANCELED` when cancelled
        /// first. The corresponding io_uring operation is `IORING_OP_TIMEOUT`
        /// with `IORING_TIMEOUT_ABS`.
        case timeout(deadline: UnsafePointer<__kernel_timespec>)
    }

    enum EngineState: UInt8 {
        case new, queued, inFlight, done
    }

    public let operation: Operation
    public let owner: AnyObject?
    /// The closure given to `init`; an empty one for a request made for a
    /// `target`.
    private let closure: @Sendable (Int32) -> Void
    /// The completion as a closure. Engines call `complete(_:)`, which
    /// makes none; for a request made for a `target` this one allocates a
    /// closure that tells it.
    public var completion: @Sendable (Int32) -> Void {
        guard target != nil else { return closure }
        return { [self] res in complete(res) }
    }
    /// Told of the completion instead of a closure (see `IORequestTarget`).
    let target: (any IORequestTarget)?
    /// The target's name for this request (a channel operation's slot).
    package let tag: Int
    /// A read or write on this fd may wait indefinitely (pipe, socket, tty):
    /// the thread-pool backend then waits in `poll` so that a cancel can
    /// interrupt it. io_uring needs no hint.
    public let mayBlock: Bool

    // `@exclusivity(unchecked)`: the engine's fields below are touched only
    // by the thread that owns the request (see the class comment), so the
    // runtime's dynamic exclusivity checks can find nothing.
    @exclusivity(unchecked) var engineState: EngineState = .new
    /// Set by `IOEngine.submit(linked:)`: the next request runs only if this
    /// one succeeds in full (`IOSQE_IO_LINK`).
    @exclusivity(unchecked) var linkNext = false
    /// With `linkNext`: the next request runs whatever this one's result
    /// (`IOSQE_IO_HARDLINK`), unless this one was itself cancelled because
    /// an earlier link broke.
    @exclusivity(unchecked) var hardLinkNext = false
    /// On the first request of a linked chain: the number of requests in it.
    @exclusivity(unchecked) var chainLength = 1
    /// The chain's first request, on every request of a chain (nil otherwise).
    weak var chainHead: IORequest?
    /// Its place in the backend's backlog while `.queued` (see `TicketQueue`).
    @exclusivity(unchecked) var backlogTicket = 0
    /// io_uring: submit with `IOSQE_ASYNC` (an open of a FIFO for writing,
    /// retried after the ring's non-blocking first try gave ENXIO).
    @exclusivity(unchecked) var forceAsync = false
    /// Thread-pool backend: the worker running the request, while it runs.
    @exclusivity(unchecked) var worker: AnyObject?
    /// io_uring: the SQE's `ioprio` for a read or write (0: the default
    /// class). Set before the request is submitted, read by the ring thread.
    /// The thread pool ignores it.
    @exclusivity(unchecked) package var ioPriority: UInt16 = 0

    /// `IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)`: the disk serves the request
    /// only when no other class waits (class 3 in bits 13-15; any process may
    /// use it, no capability needed).
    package static let idleIOPriority: UInt16 = 3 << 13

    /// Registered resources the io_uring backend may use for this request;
    /// the thread pool ignores them (same result either way).
    /// A `.read` or `.write` whose buffer lies inside this registered pool
    /// buffer: `IORING_OP_READ_FIXED` / `WRITE_FIXED`.
    let fixedBuffer: RegisteredBuffer?
    /// The fd's entry in the ring's registered-file table, where it has one
    /// (reads and writes): `IOSQE_FIXED_FILE`.
    let fixedFile: FixedFileSlot?
    /// Work to run on the ring thread instead of a system call (table
    /// updates); its result is the completion's `res`. io_uring only.
    let ringTask: (@Sendable (UringBackend) -> Int32)?
    /// For `.pollMultishot`: runs for each readiness that does not end the
    /// request (a CQE with `IORING_CQE_F_MORE`), on the engine's thread.
    package let shot: (@Sendable (Int32) -> Void)?

    /// The one designated initialiser: the others name what they set.
    private init(_ operation: Operation, owner: AnyObject?, mayBlock: Bool,
                 closure: @escaping @Sendable (Int32) -> Void, target: (any IORequestTarget)?, tag: Int,
                 fixedBuffer: RegisteredBuffer?, fixedFile: FixedFileSlot?,
                 ringTask: (@Sendable (UringBackend) -> Int32)?, shot: (@Sendable (Int32) -> Void)?) {
        self.operation = operation
        self.owner = owner
        self.mayBlock = mayBlock
        self.closure = closure
        self.target = target
        self.tag = tag
        self.fixedBuffer = fixedBuffer
        self.fixedFile = fixedFile
        self.ringTask = ringTask
        self.shot = shot
    }

    /// A request whose `completion` runs with the result; the engine keeps
    /// `owner` alive until then. `mayBlock`: see ``mayBlock``.
    public convenience init(_ operation: Operation, owner: AnyObject? = nil, mayBlock: Bool = false,
                            completion: @escaping @Sendable (Int32) -> Void) {
        self.init(operation, owner: owner, mayBlock: mayBlock, fixedBuffer: nil, fixedFile: nil, completion: completion)
    }

    /// A request with registered-resource hints.
    package convenience init(_ operation: Operation, owner: AnyObject?, mayBlock: Bool, fixedBuffer: RegisteredBuffer?,
                             fixedFile: FixedFileSlot?, completion: @escaping @Sendable (Int32) -> Void) {
        self.init(operation, owner: owner, mayBlock: mayBlock, closure: completion, target: nil, tag: 0,
                  fixedBuffer: fixedBuffer, fixedFile: fixedFile, ringTask: nil, shot: nil)
    }

    /// A request whose completion goes to `target`, with `tag`: no closure
    /// (and no closure context to allocate) per request. The engine keeps
    /// `target` and `owner` alive until then.
    package convenience init(_ operation: Operation, target: any IORequestTarget, tag: Int, owner: AnyObject?,
                             mayBlock: Bool, fixedBuffer: RegisteredBuffer? = nil, fixedFile: FixedFileSlot? = nil) {
        self.init(operation, owner: owner, mayBlock: mayBlock, closure: IORequest.noCompletion, target: target,
                  tag: tag, fixedBuffer: fixedBuffer, fixedFile: fixedFile, ringTask: nil, shot: nil)
    }

    private static let noCompletion: @Sendable (Int32) -> Void = { _ in }

    /// Runs the completion with `res` (the target's, or the closure): what
    /// engines call once the request is over.
    @inline(__always)
    public func complete(_ res: Int32) {
        if let target {
            target.requestCompleted(self, tag: tag, result: res)
        } else {
            closure(res)
        }
    }

    /// Work for the ring thread (`UringBackend.perform(onRingThread:)`).
    convenience init(ringTask: @escaping @Sendable (UringBackend) -> Int32, completion: @escaping @Sendable (Int32) -> Void) {
        self.init(.nop, owner: nil, mayBlock: false, closure: completion, target: nil, tag: 0,
                  fixedBuffer: nil, fixedFile: nil, ringTask: ringTask, shot: nil)
    }

    /// A `.pollMultishot` request: `shot` runs for each readiness that
    /// leaves the request in flight, `completion` once at its end.
    package convenience init(_ operation: Operation, owner: AnyObject?, shot: @escaping @Sendable (Int32) -> Void,
                             completion: @escaping @Sendable (Int32) -> Void) {
        self.init(operation, owner: owner, mayBlock: false, closure: completion, target: nil, tag: 0,
                  fixedBuffer: nil, fixedFile: nil, ringTask: nil, shot: shot)
    }

    var isPoll: Bool {
        if case .poll = operation { return true }
        return false
    }

    var isTimeout: Bool {
        if case .timeout = operation { return true }
        return false
    }

    var isMultishotPoll: Bool {
        if case .pollMultishot = operation { return true }
        return false
    }

    /// The bytes a read or write asks for: a linked chain breaks when fewer move,
    /// as io_uring breaks it on a short read or write.
    var requestedLength: Int? {
        switch operation {
        case .read(_, let buffer, _): return buffer.count
        case .readChained(_, let buffer, _): return buffer.count
        case .write(_, let buffer, _): return buffer.count
        case .splice(_, _, _, _, let length): return length
        case .readv(_, let iovecs, let count, _), .writev(_, let iovecs, let count, _):
            var total = 0
            for i in 0..<count { total += iovecs[i].iov_len }
            return total
        default: return nil
        }
    }

    /// Whether `res` lets the next request of a linked chain run.
    func linkSucceeds(_ res: Int32) -> Bool {
        if res < 0 { return false }
        if let length = requestedLength { return Int(res) >= length }
        return true
    }

    var isCancel: Bool {
        if case .cancel = operation { return true }
        return false
    }
}

/// An object told of its requests' completions (`IORequest.complete`), in
/// place of a closure per request: a channel operation, whose `tag` says
/// which slot. Called on the engine's thread: short, never blocking.
package protocol IORequestTarget: AnyObject, Sendable {
    func requestCompleted(_ request: IORequest, tag: Int, result: Int32)
}

/// The file the requests of one linked chain share (see
/// `IORequest.Operation.openChained`): opened by the chain's first request,
/// closed by its last, never seen by the caller except through
/// `installChained`'s fd.
@_spi(Engine)
// @unchecked: `slot` is touched only by the ring thread (set when the chain
// enters the SQ, cleared at the close's completion); `fd` only by the pool
// worker that runs the chain, its requests one after another.
public final class ChainedFile: @unchecked Sendable {
    /// io_uring: the registered-file table slot, -1 when none is held.
    var slot: Int32 = -1
    /// io_uring: no slot was free when the chain was to enter the SQ; the
    /// open then fails with `ENFILE` and the rest of the chain is cancelled.
    public internal(set) var noSlot = false
    /// Thread pool: the open fd, -1 when none.
    var fd: Int32 = -1

    public init() {}
}

/// What both backends provide.
protocol EngineBackend: AnyObject, Sendable {
    func submit(_ request: IORequest)
    func submit(contentsOf requests: [IORequest])
    func shutdown()
}

extension TicketQueue where Element == IORequest {
    /// Removes a queued request, with its whole linked chain when it is part
    /// of one; returns what was removed, in order.
    mutating func removeQueued(_ target: IORequest) -> [IORequest] {
        guard let head = target.chainHead, head.chainLength > 1 else {
            return remove(ticket: target.backlogTicket).map { [$0] } ?? []
        }
        var removed: [IORequest] = []
        for ticket in head.backlogTicket..<(head.backlogTicket + head.chainLength) {
            if let r = remove(ticket: ticket) { removed.append(r) }
        }
        return removed
    }
}
