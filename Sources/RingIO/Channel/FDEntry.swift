#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

/// What kind of file an fd refers to, and what that means for I/O on it.
enum FileKind: Sendable, Equatable {
    case regular, directory, fifo, socket, character, block, other

    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFIFO: self = .fifo
        case S_IFSOCK: self = .socket
        case S_IFCHR: self = .character
        case S_IFBLK: self = .block
        default: self = .other
        }
    }

    /// Positional reads and writes work, and several may be in flight at once.
    var isPositional: Bool { self == .regular || self == .block }

    /// Reads and writes may wait indefinitely (a pipe, a socket, a tty).
    var mayBlock: Bool { self == .fifo || self == .socket || self == .character || self == .other }

    /// Why a channel of `channelKind` cannot use such a file: a directory
    /// (`EISDIR`, any kind), or a pipe or socket for a random channel
    /// (`ESPIPE`); `nil` when it can.
    func unusable(for channelKind: IOChannel.Kind) -> Errno? {
        if self == .directory { return .isDirectory }
        if channelKind == .random && (self == .fifo || self == .socket) { return .illegalSeek }
        return nil
    }

    /// Reads and writes are independent directions (a pending read does not
    /// hold back a write).
    var hasIndependentDirections: Bool { !isPositional }
}

/// What `fstat` says of an fd, as far as channels care.
struct FileIdentity: Sendable, Hashable {
    let device: UInt64
    let inode: UInt64
}

/// `fstat(fd)`: the file's kind and identity, or the error.
func describe(fd: Int32) -> Result<(FileKind, FileIdentity), Errno> {
    var st = stat()
    while fstat(fd, &st) != 0 {
        let e = cliburing_errno()
        if e != EINTR { return .failure(Errno(rawValue: e)) }
    }
    return .success((FileKind(mode: st.st_mode), FileIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))))
}

/// The state shared by every channel of one file descriptor: the order in
/// which their operations run, their barriers, and when their cleanup
/// handlers may run.
///
/// ```
///  items (not started, in submission order)        running
///  ┌──────┬──────┬─────────┬──────┐
///  │ op A │ op B │ barrier │ op C │  ──pump──▶  stream ops: one per lane at a time
///  └──────┴──────┴─────────┴──────┘             random ops: all at once
///                                               a barrier: alone, after every earlier op
/// ```
///
/// A regular file has one lane (reads and writes of every stream channel in
/// one FIFO); a pipe, socket or tty has a read lane and a write lane.
///
/// Channels made from an fd share the entry found under (fd, st_dev, st_ino):
/// a closed and reused fd number is a different file and gets a new entry.
/// A path channel has an entry of its own, which owns (and closes) its fd.
// @unchecked: immutable fields after init; every `var` is guarded by `lock`.
// Lock order: channel, then entry, then operation, then queue. The entry
// calls into an operation with its lock held only to queue that operation's
// last handler calls (`pipelinedWriteEnded`); it never runs a handler, a
// barrier or a cleanup with its lock held, and an operation never calls the
// entry with its own lock held.
final class FDEntry: @unchecked Sendable {
    struct Key: Hashable {
        let fd: Int32
        let identity: FileIdentity
    }

    enum Item {
        case operation(ChannelOperation)
        case barrier(IOQueue, @Sendable () -> Void)
    }

    struct Cleanup {
        let queue: IOQueue
        let handler: @Sendable (Errno?) -> Void
    }

    let fd: Int32
    let kind: FileKind
    let key: Key?
    /// The entry opened the fd (a path channel) and closes it before cleanup.
    let ownsDescriptor: Bool
    /// The fd has `O_APPEND`: writes go one at a time at the file position.
    let appendMode: Bool
    /// The fd's place in an io_uring ring's registered-file table (regular
    /// files and block devices).
    let fixedFile: FixedFileSlot?
    /// Set while the fd is in direct-I/O mode. Its own lock: operations read
    /// it under the entry's.
    private let direct: Locked<DirectAlignment?>

    private let lock = PlainLock()
    private var items: [Item] = []
    private var running = 0
    private var laneBusy: (Bool, Bool) = (false, false)
    private var barrierRunning = false
    /// A direct write with a read-modify-write runs alone, like a barrier.
    private var exclusiveRunning = false
    private var channels = 0
    private var handlersOutstanding = 0
    private var cleanups: [Cleanup] = []
    private var finished = false
    /// Pipelined stream writes started and not yet released, in order; the
    /// position after the last of them; whether one of them failed.
    private var run: [ChannelOperation] = []
    private var runPosition: Int64 = 0
    private var runBroken = false
    private var positionAfterRun: Int64 = 0

    /// How many stream writes of a regular file may run at once. (A log of
    /// 64 KiB records, all queued: 0.57 GiB/s with 4, 0.62 with 8, 0.83 with
    /// 16, 0.86 with 32; io_uring hands buffered ext4 writes to one io-wq
    /// worker per file, so deeper queues only hide per-request costs.)
    static let maxPipelinedWrites = 16

    private init(fd: Int32, kind: FileKind, key: Key?, ownsDescriptor: Bool) {
        self.fd = fd
        self.kind = kind
        self.key = key
        self.ownsDescriptor = ownsDescriptor
        let flags = fcntl(fd, F_GETFL)
        self.appendMode = flags >= 0 && (flags & O_APPEND) != 0
        self.fixedFile = kind.isPositional ? FixedFileSlot(fd: fd) : nil
        // Opened with O_DIRECT by its owner: align from the start.
        let opened = kind.isPositional && flags >= 0 && flags & cliburing_o_direct() != 0
        self.direct = Locked(opened ? DirectAlignment.of(fd: fd) : nil)
    }

    /// The alignment every request must have, while the fd is in direct-I/O mode.
    var directAlignment: DirectAlignment? { direct.withLock { $0 } }

    func setDirectAlignment(_ alignment: DirectAlignment?) {
        direct.withLock { $0 = alignment }
    }


    // MARK: - the registry of fd entries

    private static let registry = Locked<[Key: FDEntry]>([:])

    /// The entry shared by the channels of `fd`, with one more channel attached.
    static func attach(fd: Int32, kind: FileKind, identity: FileIdentity) -> FDEntry {
        let key = Key(fd: fd, identity: identity)
        return registry.withLock { entries in
            if let entry = entries[key], entry.attachChannel() { return entry }
            let entry = FDEntry(fd: fd, kind: kind, key: key, ownsDescriptor: false)
            entry.channels = 1
            entries[key] = entry
            return entry
        }
    }

    /// A new entry for an fd a path channel opened; it closes the fd at the end.
    static func owning(fd: Int32, kind: FileKind) -> FDEntry {
        let entry = FDEntry(fd: fd, kind: kind, key: nil, ownsDescriptor: true)
        entry.channels = 1
        return entry
    }

    /// One more channel shares this entry; false if it has already finished.
    func attachChannel() -> Bool {
        lock.withLock {
            if finished { return false }
            channels += 1
            return true
        }
    }

    // MARK: - scheduling

    /// The lane of a stream operation: 0, or 1 for writes where the two
    /// directions are independent.
    func lane(isRead: Bool) -> Int {
        kind.hasIndependentDirections && !isRead ? 1 : 0
    }

    /// Queues `operation`; returns the operations that may start now. Call
    /// `start(_:)` with them once no lock is held.
    func enqueue(_ operation: ChannelOperation) -> [Item] {
        lock.withLock {
            handlersOutstanding += 1
            items.append(.operation(operation))
            return pumpLocked()
        }
    }

    /// Queues a barrier; returns what may start now.
    func enqueueBarrier(queue: IOQueue, _ work: @escaping @Sendable () -> Void) -> [Item] {
        lock.withLock {
            items.append(.barrier(queue, work))
            return pumpLocked()
        }
    }

    /// Starts what `enqueue`, `enqueueBarrier` or a completion released.
    func start(_ ready: [Item]) {
        for item in ready {
            switch item {
            case .operation(let operation):
                operation.start()
            case .barrier(let queue, let work):
                queue.async { [self] in
                    work()
                    barrierReturned()
                }
            }
        }
    }

    /// Removes `operation` if it has not started; false if it has.
    func removeIfPending(_ operation: ChannelOperation) -> Bool {
        lock.withLock {
            guard let i = items.firstIndex(where: {
                if case .operation(let o) = $0 { return o === operation }
                return false
            }) else { return false }
            items.remove(at: i)
            return true
        }
    }

    /// An operation's I/O is over (its last handler call may still be queued).
    func operationFinishedIO(_ operation: ChannelOperation) {
        let (ready, cleanup) = lock.withLock { () -> ([Item], [Cleanup]?) in
            running -= 1
            if operation.ranExclusive { exclusiveRunning = false }
            if operation.isStream && (operation.pipelineBase == nil || run.isEmpty) {
                setLane(operation.lane, busy: false)
            }
            let ready = pumpLocked()
            return (ready, ready.isEmpty ? finishIfIdleLocked() : nil)
        }
        start(ready)
        if let cleanup { runCleanups(cleanup) }
    }

    /// An operation's last handler call returned (or it never started).
    func operationHandlersReturned() {
        let cleanup = lock.withLock { () -> [Cleanup]? in
            handlersOutstanding -= 1
            return finishIfIdleLocked()
        }
        if let cleanup { runCleanups(cleanup) }
    }

    private func barrierReturned() {
        let (ready, cleanup) = lock.withLock { () -> ([Item], [Cleanup]?) in
            barrierRunning = false
            let ready = pumpLocked()
            return (ready, ready.isEmpty ? finishIfIdleLocked() : nil)
        }
        start(ready)
        if let cleanup { runCleanups(cleanup) }
    }

    /// A pipelined stream write's I/O ended. Queues the last handler calls
    /// of the writes of the run that may now report, in submission order
    /// (with `.canceled` overriding their own result once an earlier write
    /// of the run failed), and returns them, each with whether its calls must
    /// be run inline by the caller. Sets the file position once the run is
    /// over: after the last write that succeeded in order, or at the end of
    /// what the failed one wrote.
    ///
    /// Lock order: the entry's lock, then each operation's (which never calls
    /// into the entry with its own lock held).
    func pipelinedWriteEnded(_ operation: ChannelOperation, succeeded: Bool,
                             endPosition: Int64) -> [(ChannelOperation, Bool)] {
        lock.withLock { () -> [(ChannelOperation, Bool)] in
            operation.pipelineResult = (succeeded, endPosition)
            var out: [(ChannelOperation, Bool)] = []
            while let head = run.first, let result = head.pipelineResult {
                run.removeFirst()
                if runBroken {
                    out.append((head, head.queueFinalDeliveries(override: .canceled)))
                } else {
                    out.append((head, head.queueFinalDeliveries(override: nil)))
                    positionAfterRun = result.endPosition
                    if !result.succeeded { runBroken = true }
                }
            }
            guard run.isEmpty else { return out }
            runBroken = false
            // Under the lock: an earlier write of the run may be in
            // `operationFinishedIO` on another thread (thread pool), freeing
            // the lane; the next stream operation must find the position set.
            _ = lseek(fd, off_t(positionAfterRun), SEEK_SET)
            return out
        }
    }

    /// A channel of this entry closed; its cleanup runs once every channel
    /// has closed and every handler has returned.
    func channelClosed(cleanup: Cleanup) {
        let ready = lock.withLock { () -> [Cleanup]? in
            channels -= 1
            cleanups.append(cleanup)
            return finishIfIdleLocked()
        }
        if let ready { runCleanups(ready) }
    }

    private func setLane(_ lane: Int, busy: Bool) {
        if lane == 0 { laneBusy.0 = busy } else { laneBusy.1 = busy }
    }

    private func laneIsBusy(_ lane: Int) -> Bool {
        lane == 0 ? laneBusy.0 : laneBusy.1
    }

    /// Takes from `items` what may start: stream operations whose lane is
    /// free (in order), random operations, and a barrier once nothing runs.
    private func pumpLocked() -> [Item] {
        if barrierRunning || exclusiveRunning { return [] }
        let alignment = directAlignment
        var ready: [Item] = []
        var blocked: (Bool, Bool) = (false, false)
        var i = 0
        while i < items.count {
            switch items[i] {
            case .barrier:
                if i == 0 && running == 0 && ready.isEmpty {
                    barrierRunning = true
                    ready.append(items.remove(at: 0))
                }
                return ready
            case .operation(let operation):
                if let alignment, directWriteNeedsExclusiveLocked(operation, alignment) {
                    if i == 0 && running == 0 && ready.isEmpty {
                        exclusiveRunning = true
                        operation.ranExclusive = true
                        running += 1
                        if operation.isStream { setLane(operation.lane, busy: true) }
                        ready.append(items.remove(at: 0))
                    }
                    return ready
                }
                if operation.isStream {
                    let lane = operation.lane
                    let isBlocked = lane == 0 ? blocked.0 : blocked.1
                    if !isBlocked && !run.isEmpty && run.count < Self.maxPipelinedWrites
                        && operation.isPipelinableWrite {
                        // Join the running writes: start where they will end.
                        operation.pipelineBase = runPosition
                        runPosition += Int64(operation.length)
                        run.append(operation)
                        running += 1
                        ready.append(items.remove(at: i))
                        continue
                    }
                    if isBlocked || laneIsBusy(lane) {
                        if lane == 0 { blocked.0 = true } else { blocked.1 = true }
                        i += 1
                        continue
                    }
                    setLane(lane, busy: true)
                    if operation.isPipelinableWrite {
                        let position = lseek(fd, 0, SEEK_CUR)
                        if position >= 0 {
                            operation.pipelineBase = Int64(position)
                            runPosition = Int64(position) + Int64(operation.length)
                            positionAfterRun = Int64(position)
                            run = [operation]
                        }
                    }
                }
                running += 1
                ready.append(items.remove(at: i))
            }
        }
        return ready
    }

    /// With the lock held: whether a write in direct-I/O mode must run alone
    /// (`ChannelOperation.needsExclusiveRun`). A stream write joining the
    /// running pipelined writes starts where they end; one on a free lane at
    /// the file position; one behind a busy lane is treated as unaligned.
    private func directWriteNeedsExclusiveLocked(_ operation: ChannelOperation, _ alignment: DirectAlignment) -> Bool {
        guard operation.direction == .write else { return false }
        guard operation.isStream else { return operation.needsExclusiveRun(alignment, streamPosition: nil) }
        let position: Int64?
        if !run.isEmpty {
            position = operation.isPipelinableWrite && run.count < Self.maxPipelinedWrites ? runPosition : nil
        } else {
            position = laneIsBusy(operation.lane) ? nil : Int64(lseek(fd, 0, SEEK_CUR))
        }
        return operation.needsExclusiveRun(alignment, streamPosition: position)
    }

    /// With the lock held: if no channel is open and nothing is left to run
    /// or return, marks the entry finished and returns the cleanups to run.
    private func finishIfIdleLocked() -> [Cleanup]? {
        guard !finished, channels == 0, handlersOutstanding == 0, running == 0,
              items.isEmpty, !barrierRunning else { return nil }
        finished = true
        let out = cleanups
        cleanups = []
        return out
    }

    private func runCleanups(_ list: [Cleanup]) {
        // The ring's table holds the file open: empty its slot first.
        guard let fixedFile else { return closeAndRunCleanups(list) }
        fixedFile.release { [self] in closeAndRunCleanups(list) }
    }

    private func closeAndRunCleanups(_ list: [Cleanup]) {
        if let key {
            FDEntry.registry.withLock { entries in
                if entries[key] === self { entries[key] = nil }
            }
        }
        if ownsDescriptor {
            _ = Glibc.close(fd)
        }
        for cleanup in list {
            let handler = cleanup.handler
            cleanup.queue.async { handler(nil) }
        }
    }
}
