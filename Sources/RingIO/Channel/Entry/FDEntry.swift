#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// What kind of file an fd refers to: swift-system's `FileType` (from
/// `Stat.type`, or `FileType(mode:)` for a statx mode), the library's one
/// mapping of `st_mode`.
package typealias FileKind = FileType

/// What the kind of a file means for I/O on it.
extension FileType {
    /// Positional reads and writes work, and several may be in flight at once.
    var isPositional: Bool { self == .regular || self == .blockSpecial }

    /// Reads and writes may wait indefinitely (a pipe, a socket, a tty, or
    /// a kind the library does not know).
    var mayBlock: Bool { !(self == .regular || self == .directory || self == .blockSpecial) }

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
    Result { () throws(Errno) in try Syscall.fstat(fd) }.map {
        ($0.type, FileIdentity(device: UInt64($0.deviceID.rawValue), inode: UInt64($0.inode.rawValue)))
    }
}

/// The state shared by every channel of one file descriptor: the order in
/// which their operations run, their barriers, and when their cleanup
/// handlers may run. The rules are `EntryScheduler`'s; this shell holds the
/// one lock around it and carries out what its transitions return.
///
/// A regular file has one lane (reads and writes of every stream channel in
/// one FIFO); a pipe, socket or tty has a read lane and a write lane.
///
/// Channels made from an fd share the entry found under (fd, st_dev, st_ino):
/// a closed and reused fd number is a different file and gets a new entry.
/// A path channel has an entry of its own, which owns (and closes) its fd.
// @unchecked: immutable fields after init; `scheduler` (and the tickets it
// writes on operations) is guarded by `lock`.
// Lock order: channel, then entry, then operation, then queue. The entry
// calls into an operation with its lock held only to queue that operation's
// last handler calls (`coalescedWritesEnded`); it never runs a handler, a
// barrier or a cleanup with its lock held, and an operation never calls the
// entry with its own lock held.
final class FDEntry: @unchecked Sendable {
    struct Key: Hashable {
        let fd: Int32
        let identity: FileIdentity
    }

    struct Barrier {
        let queue: IOQueue
        let work: @Sendable () -> Void
    }

    struct Cleanup {
        let queue: IOQueue
        /// `nil`: a channel made without one; nothing to run.
        let handler: (@Sendable (Errno?) -> Void)?
    }

    typealias Scheduler = EntryScheduler<ChannelOperation, Barrier, Cleanup, CoalescedWrite>
    typealias Item = Scheduler.Item
    typealias Ready = Scheduler.Ready

    let fd: Int32
    let kind: FileKind
    /// `kind == .regular` and `kind.hasIndependentDirections`, kept: the
    /// inline read asks on every call, and `FileType`'s constants are
    /// calls into Glibc (`S_IFREG`) that do not inline.
    let isRegular: Bool
    let splitsDirections: Bool
    let key: Key?
    /// The entry opened the fd (a path channel) and closes it before cleanup.
    let ownsDescriptor: Bool
    /// The fd has `O_APPEND`: every write lands at the end of the file.
    let appendMode: Bool
    /// The fd was opened write-only: a direct write cannot read a block back
    /// for a read-modify-write.
    let writeOnly: Bool
    /// The fd's place in an io_uring ring's registered-file table (regular
    /// files and block devices).
    let fixedFile: FixedFileSlot?
    /// Set while the fd is in direct-I/O mode. Its own lock: operations read
    /// it under the entry's.
    private let direct: Locked<DirectAlignment?>
    /// Whether `direct` may hold an alignment: most fds never are in
    /// direct-I/O mode, and then every scheduler step skips that lock.
    private let directFlag: Atomic<Bool>

    /// The file's device (`st_dev`), when known.
    let device: UInt64?
    /// `NoWaitReads` of the device, as this entry knows it (see FDEntry+NoWait.swift).
    let noWait: Atomic<UInt8>
    /// Reads done inline, and inline tries that went to the engine after
    /// all (for tests and benchmarks).
    let inlineReads = Atomic<Int>(0)
    let inlineFallbacks = Atomic<Int>(0)
    /// Awaited reads and writes done on the caller's thread with no
    /// operation at all (ChannelCore+Inline.swift; for tests).
    let awaitedInline = Atomic<Int>(0)
    /// Handler reads done on the caller's thread with no operation, their
    /// one handler call queued (ChannelCore+Inline.swift; for tests).
    let handlerInline = Atomic<Int>(0)

    private let lock = PlainLock()
    // `@exclusivity(unchecked)`: read and written only under `lock`; the
    // runtime's dynamic exclusivity checks can find nothing.
    @exclusivity(unchecked) private var scheduler: Scheduler
    /// A coalesced run stopped short (an error) with runs behind it in
    /// flight: where its bytes end, its error, and the runs released after
    /// it, held until the last run in flight ends (`coalescedWritesEnded`).
    @exclusivity(unchecked) private var shortRun: (end: Int64, error: Errno, held: [CoalescedWrite])?

    /// The scheduler's questions, answered from the fd.
    private struct Host: EntrySchedulerHost {
        let fd: Int32
        let alignment: DirectAlignment?
        let appendMode: Bool
        var directMode: Bool { alignment != nil }
        func filePosition() -> Int64? {
            if appendMode {
                // Where an O_APPEND write lands, and where it leaves the
                // position (a writer on another fd may still append first:
                // the bytes stay whole, the position may then fall short).
                return (try? Syscall.fstat(fd)).map { Int64($0.size) }
            }
            return try? Syscall.lseek(fd, 0, SEEK_CUR)
        }
        func needsExclusiveRun(_ operation: ChannelOperation, streamPosition: Int64?) -> Bool {
            guard let alignment else { return false }
            return operation.needsExclusiveRun(alignment, streamPosition: streamPosition)
        }
        func mayCoalesce(_ operation: ChannelOperation) -> Bool {
            guard let alignment else { return true }
            return operation.mayCoalesce(alignment)
        }
    }

    private var host: Host { Host(fd: fd, alignment: directAlignment, appendMode: appendMode) }

    private init(fd: Int32, kind: FileKind, key: Key?, ownsDescriptor: Bool, device: UInt64?, flags known: Int32? = nil) {
        self.fd = fd
        self.kind = kind
        self.isRegular = kind == .regular
        self.splitsDirections = kind.hasIndependentDirections
        self.key = key
        self.ownsDescriptor = ownsDescriptor
        self.device = device
        self.noWait = Atomic(kind == .regular && device != nil
                                 ? NoWaitReads.of(device: device!).rawValue : NoWaitReads.unsupported.rawValue)
        let flags = known ?? (try? Syscall.fcntl(fd, F_GETFL)) ?? -1
        self.appendMode = flags >= 0 && (flags & O_APPEND) != 0
        self.writeOnly = flags >= 0 && (flags & O_ACCMODE) == O_WRONLY
        self.fixedFile = kind.isPositional ? FixedFileSlot(fd: fd) : nil
        // Opened with O_DIRECT by its owner: align from the start.
        let opened = kind.isPositional && flags >= 0 && flags & cliburing_o_direct() != 0
        self.direct = Locked(opened ? DirectAlignment.of(fd: fd) : nil)
        self.directFlag = Atomic(opened)
        self.scheduler = Scheduler(channels: 1)
    }

    /// The alignment every request must have, while the fd is in direct-I/O mode.
    var directAlignment: DirectAlignment? {
        directFlag.load(ordering: .acquiring) ? direct.withLock { $0 } : nil
    }

    func setDirectAlignment(_ alignment: DirectAlignment?) {
        // Set: the alignment, then the flag; cleared: the flag first. A
        // reader that misses the change reads as it would have just before.
        if alignment == nil { directFlag.store(false, ordering: .releasing) }
        direct.withLock { $0 = alignment }
        if alignment != nil { directFlag.store(true, ordering: .releasing) }
    }


    // MARK: - the registry of fd entries

    private static let registry = Locked<[Key: FDEntry]>([:])

    /// The entry shared by the channels of `fd`, with one more channel attached.
    static func attach(fd: Int32, kind: FileKind, identity: FileIdentity) -> FDEntry {
        let key = Key(fd: fd, identity: identity)
        return registry.withLock { entries in
            if let entry = entries[key], entry.attachChannel() { return entry }
            let entry = FDEntry(fd: fd, kind: kind, key: key, ownsDescriptor: false, device: identity.device)
            entries[key] = entry
            return entry
        }
    }

    /// A new entry for an fd a path channel opened; it closes the fd at the
    /// end. `flags`: those it was opened with (else `fcntl` asks).
    static func owning(fd: Int32, kind: FileKind, identity: FileIdentity? = nil, flags: Int32? = nil) -> FDEntry {
        FDEntry(fd: fd, kind: kind, key: nil, ownsDescriptor: true, device: identity?.device, flags: flags)
    }

    /// One more channel shares this entry; false if it has already finished.
    func attachChannel() -> Bool {
        lock.withLock { scheduler.attachChannel() }
    }

    // MARK: - scheduling

    /// The lane of a stream operation: 0, or 1 for writes where the two
    /// directions are independent.
    func lane(isRead: Bool) -> Int {
        splitsDirections && !isRead ? 1 : 0
    }

    /// Queues `operation`; returns the operations that may start now. Call
    /// `start(_:)` with them once no lock is held.
    func enqueue(_ operation: ChannelOperation) -> Ready {
        let pipelinable = operation.isPipelinableWrite
        let holds = operation.direction == .write ? operation.readAheadHolds() : []
        return lock.withLock {
            // A read queued ahead of this write on this fd would wait for
            // it if its chunks held back the read they came from (a read
            // handler writing to the file it reads): those never count.
            if !holds.isEmpty && !scheduler.streamReadAhead(lane: operation.lane) {
                operation.takeReadAheadHolds(holds)
            }
            return scheduler.enqueue(operation, stream: operation.isStream, lane: operation.lane,
                              isWrite: operation.direction == .write, pipelinable: pipelinable,
                              length: operation.length, regions: operation.data.regionCount, host: host)
        }
    }

    /// Queues a barrier; returns what may start now.
    func enqueueBarrier(queue: IOQueue, _ work: @escaping @Sendable () -> Void) -> Ready {
        lock.withLock { scheduler.enqueueBarrier(Barrier(queue: queue, work: work), host: host) }
    }

    /// Starts what `enqueue`, `enqueueBarrier` or a completion released.
    /// `submitting`: the operation whose submission (on this thread, now)
    /// released them; it may try its read inline (`ChannelOperation.start`).
    func start(_ ready: Ready, submitting: ChannelOperation? = nil) {
        for item in ready {
            switch item {
            case .operation(let operation):
                operation.start(inlineFirst: operation === submitting)
            case .writes(let operations, let offset):
                CoalescedWrite(entry: self, operations: operations, offset: offset).start()
            case .barrier(let barrier):
                barrier.queue.async { [self] in
                    barrier.work()
                    barrierReturned()
                }
            }
        }
    }

    /// An awaited operation carried out on the caller's thread
    /// (ChannelCore+Inline.swift): true when it may run now, nothing ahead
    /// of it; it then holds back what is queued behind it until `endInline`.
    /// `handler`: a handler read, whose handler call counts until
    /// `operationHandlersReturned` (or `endInline(handlerDropped: true)`).
    func beginInline(stream: Bool, isWrite: Bool, handler: Bool = false) -> Bool {
        let lane = lane(isRead: !isWrite)
        return lock.withLock { scheduler.beginInline(stream: stream, lane: lane, isWrite: isWrite, handler: handler) }
    }

    /// The inline operation `beginInline` admitted is over.
    func endInline(stream: Bool, isWrite: Bool, handlerDropped: Bool = false) {
        let lane = lane(isRead: !isWrite)
        let (ready, cleanup) = lock.withLock {
            scheduler.endInline(stream: stream, lane: lane, isWrite: isWrite, handlerDropped: handlerDropped, host: host)
        }
        start(ready)
        if let cleanup { runCleanups(cleanup) }
    }

    /// Withdraws `operation` if it has not started; false if it has.
    func removeIfPending(_ operation: ChannelOperation) -> Bool {
        lock.withLock { scheduler.withdraw(operation) }
    }

    /// Whether the scheduler ran `operation` alone (a direct read-modify-write).
    func ranExclusive(_ operation: ChannelOperation) -> Bool {
        lock.withLock { operation.ticket.ranExclusive }
    }

    /// An operation's I/O is over (its last handler call may still be queued).
    func operationFinishedIO(_ operation: ChannelOperation) {
        let (ready, cleanup) = lock.withLock { scheduler.operationFinishedIO(operation, host: host) }
        start(ready)
        if let cleanup { runCleanups(cleanup) }
    }

    /// An operation's last handler call returned (or it never started).
    func operationHandlersReturned() {
        let cleanup = lock.withLock { scheduler.handlersReturned() }
        if let cleanup { runCleanups(cleanup) }
    }

    private func barrierReturned() {
        let (ready, cleanup) = lock.withLock { scheduler.barrierReturned(host: host) }
        start(ready)
        if let cleanup { runCleanups(cleanup) }
    }

    /// The `pwritev` of the coalesced stream writes of `run` ended (its
    /// `written` and `error` are set). Once the runs that went out before it
    /// have ended too, releases them in order (`EntryScheduler`): for each,
    /// sets the file position where its written bytes end, then queues its
    /// writes' last handler calls in order, each with its share of the bytes
    /// (`CoalescedWrite.attribute`); then starts what may start next.
    ///
    /// Lock order: the entry's lock, then each operation's (which never calls
    /// into the entry with its own lock held).
    func coalescedWritesEnded(_ run: CoalescedWrite) {
        let intact = run.error == nil && !run.lengths.contains(nil)
        var inline: [ChannelOperation] = []
        var onQueues: [ChannelOperation] = []
        let (ready, cleanup) = lock.withLock { () -> (Ready, [Cleanup]?) in
            let released = scheduler.coalescedWritesEnded(run, operations: run.operations, written: run.written,
                                                          intact: intact)
            if released.isEmpty { return ([], nil) }
            func finish(_ run: CoalescedWrite, _ outcomes: [CoalescedWrite.Outcome]) {
                for (operation, outcome) in zip(run.operations, outcomes) where operation.finishCoalesced(outcome) {
                    if operation.options.inline { inline.append(operation) } else { onQueues.append(operation) }
                }
            }
            for release in released {
                let run = release.run
                if shortRun != nil {
                    shortRun!.held.append(run)
                    continue
                }
                // Under the lock, and before any of their last calls is
                // queued: the position is where they leave it when those
                // calls run, and the next stream operation finds it set.
                if let position = release.position { _ = try? Syscall.lseek(fd, position, SEEK_SET) }
                finish(run, CoalescedWrite.attribute(lengths: run.lengths, written: run.written, error: run.error))
                let end = run.offset &+ Int64(run.written)
                if let error = run.error, end >= run.sizeAtStart {
                    shortRun = (end, error, [])
                }
            }
            // Stream writes run one after another (docs/Semantics.md,
            // "Kinds"): once a run stopped short, the writes behind it must
            // not have landed past a gap. When the last run in flight has
            // ended, the bytes of those behind the short run, all past what
            // the file held when it went out, are cut off again, and their
            // writes report every byte unwritten, as if they had started
            // after it. (Should the cut fail, each reports what it wrote,
            // where it wrote it.)
            if let cut = shortRun, scheduler.runsInFlight == 0 {
                shortRun = nil
                let wrote = cut.held.contains { $0.written > 0 }
                if !wrote || (try? Syscall.ftruncate(fd, to: cut.end)) != nil {
                    _ = try? Syscall.lseek(fd, cut.end, SEEK_SET)
                    for run in cut.held {
                        finish(run, CoalescedWrite.attribute(lengths: run.lengths, written: 0, error: cut.error))
                    }
                } else {
                    var end = cut.end
                    for run in cut.held where run.written > 0 { end = Swift.max(end, run.offset &+ Int64(run.written)) }
                    _ = try? Syscall.lseek(fd, end, SEEK_SET)
                    for run in cut.held {
                        finish(run, CoalescedWrite.attribute(lengths: run.lengths, written: run.written, error: run.error))
                    }
                }
            }
            // One hop per queue for the calls of consecutive writes, in
            // order, queued before anything they let start.
            var first = 0
            while first < onQueues.count {
                let queue = onQueues[first].queue
                var end = first + 1
                while end < onQueues.count && onQueues[end].queue === queue { end += 1 }
                let group = onQueues[first..<end]
                queue.async { for operation in group { operation.runDeliveries() } }
                first = end
            }
            return scheduler.runsReleased(host: host)
        }
        for operation in inline { operation.runInlineDeliveries() }
        start(ready)
        if let cleanup { runCleanups(cleanup) }
    }

    /// The path channel that owns this entry lets go of it, if nothing is
    /// queued, running or left to return on it: the entry is then finished
    /// and the channel must call `closeReleased`. Call with the channel's
    /// lock held: no new work reaches the entry meanwhile.
    func releaseIfIdle() -> Bool {
        lock.withLock { shortRun == nil && scheduler.releaseIfIdle() }
    }

    /// Closes the fd of an entry `releaseIfIdle` finished (no cleanup
    /// handler to run: the channel still has it).
    func closeReleased() {
        runCleanups([])
    }

    /// A channel of this entry closed; its cleanup runs once every channel
    /// has closed and every handler has returned.
    func channelClosed(cleanup: Cleanup) {
        let ready = lock.withLock { scheduler.channelClosed(cleanup) }
        if let ready { runCleanups(ready) }
    }

    private func runCleanups(_ list: [Cleanup]) {
        // The ring's table holds the file open: empty its slot first.
        guard let fixedFile, !fixedFile.releaseIfUnregistered() else { return closeAndRunCleanups(list) }
        fixedFile.release { [self] in closeAndRunCleanups(list) }
    }

    private func closeAndRunCleanups(_ list: [Cleanup]) {
        if let key {
            FDEntry.registry.withLock { entries in
                if entries[key] === self { entries[key] = nil }
            }
        }
        if ownsDescriptor {
            Syscall.closeIgnoringErrors(fd)
            PathDescriptors.shared.closed()
        }
        for cleanup in list {
            guard let handler = cleanup.handler else { continue }
            cleanup.queue.async { handler(nil) }
        }
    }
}
