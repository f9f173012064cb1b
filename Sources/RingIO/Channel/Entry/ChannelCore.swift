#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

/// How a path channel opens its file.
struct PathSpec: Sendable {
    let path: FilePath
    let mode: FileDescriptor.AccessMode
    let options: FileDescriptor.OpenOptions
    let permissions: FilePermissions?

    var openFlags: Int32 { mode.rawValue | options.rawValue | O_CLOEXEC }

    /// The flags to open the file again after the channel let go of its
    /// fd: never `O_TRUNC` (it would cut off what the channel wrote), never
    /// `O_EXCL` (the file is the channel's own by now), never `O_CREAT` (a
    /// file removed since is not made anew: the open fails).
    var reopenFlags: Int32 { openFlags & ~(O_TRUNC | O_EXCL | O_CREAT) }
}

/// The state of one channel, shared with its operations; `IOChannel` is the
/// public face that closes it when released. The shell around its
/// `ChannelLifecycle`: it holds the one lock around it, and carries out what
/// each event returns once the lock is released.
// @unchecked: `kind`, `queue`, `engine`, `cleanup` and `pathSpec` are
// immutable; every other field is read and written only with `lock` held.
package final class ChannelCore: @unchecked Sendable {
    enum Target {
        /// Operations go to this entry; a random channel's offsets count from `base`.
        case entry(FDEntry, base: Int64)
        /// A path channel that has not opened its file yet.
        case unopened
        /// Creation or open failed: every operation gets this error.
        case failed(Errno)
    }

    typealias Lifecycle = ChannelLifecycle<FDEntry, ChannelOperation>

    let kind: IOChannel.Kind
    package let queue: IOQueue
    package let engine: IOEngine
    /// `nil`: the channel was made without a cleanup handler, and its close
    /// submits nothing to the queue (no worker woken for an empty closure).
    let cleanup: (@Sendable (Errno?) -> Void)?
    let pathSpec: PathSpec?
    /// `PathDescriptors.shared` for a path channel (`nil` otherwise), kept:
    /// every use stamps its clock, and a global costs a `swift_once` check.
    let pathDescriptors: PathDescriptors?
    /// When a path channel made unchecked was made (`UncheckedPaths`; 0 for any other).
    let uncheckedSince: UInt64

    // (Not private: also ChannelCore+Path.swift's.)
    let lock = PlainLock()
    // `@exclusivity(unchecked)`: read and written only under `lock`; the
    // runtime's dynamic exclusivity checks can find nothing (they cost a
    // call and a thread-local lookup on every inline read).
    @exclusivity(unchecked) var lifecycle: Lifecycle
    @exclusivity(unchecked) var settings = ChannelSettings()
    /// The operations whose last handler call has not returned: an intrusive
    /// list through their `activeNext`/`activePrevious` (no hashing, no
    /// allocation per operation).
    private var activeHead: ChannelOperation?
    /// A path channel's file as first opened (st_dev, st_ino): a reopen
    /// must find the same one.
    var openedIdentity: FileIdentity?
    /// The path's check found a regular file (a read may then open it on
    /// its own thread: `openPathNow`).
    var checkedRegular = false
    /// What an unchecked path's open on a reader's thread found when it was
    /// not a regular file (a FIFO, a device): kept open until the channel's
    /// own open has replaced it, or the channel failed or closed, so that the
    /// other end of a FIFO never sees its reader come and go
    /// (ChannelCore+Path.swift).
    var heldDescriptor: Int32?
    /// The flags to give the fd of a regular file opened on a reader's
    /// thread, which still has `O_NONBLOCK` (`settleFlagsLocked`).
    var unsettledFlags: Int32?
    /// Why a reopen failed, in words (`openError`'s detail).
    var reopenDetail: String?
    /// A path channel's place in `PathDescriptors`' list of holders (least
    /// recently used first), and whether it is in it: guarded by that
    /// object's lock, not this one's.
    var holderPrevious: ChannelCore?
    var holderNext: ChannelCore?
    var isHolder = false

    /// A channel on an fd (or on an entry of another channel), or a failed one.
    init(kind: IOChannel.Kind, target: Target, queue: IOQueue, engine: IOEngine,
         cleanup: (@Sendable (Errno?) -> Void)?) {
        self.kind = kind
        switch target {
        case .entry(let entry, let base): self.lifecycle = Lifecycle(.open(entry, base: base))
        case .unopened: self.lifecycle = Lifecycle(.unopened(.checking))
        case .failed(let error): self.lifecycle = Lifecycle(.failed(error))
        }
        self.queue = queue
        self.engine = engine
        self.cleanup = cleanup
        self.pathSpec = nil
        self.pathDescriptors = nil
        self.uncheckedSince = 0
        if case .failed(let error) = target {
            // The lifecycle counts it handed off.
            if let cleanup { queue.async { cleanup(error) } }
        }
    }

    /// A path channel; checks the path at once, opens it on first use. A
    /// read-only one whose first read may open it on the reader's thread
    /// is checked by that open, or by the sweep if it is not used at once
    /// (ChannelCore+Path.swift).
    init(kind: IOChannel.Kind, path: PathSpec, queue: IOQueue, engine: IOEngine,
         cleanup: (@Sendable (Errno?) -> Void)?) {
        let unchecked = Self.mayOpenBeforeCheck(path)
        self.kind = kind
        self.lifecycle = Lifecycle(.unopened(unchecked ? .unchecked : .checking))
        self.queue = queue
        self.engine = engine
        self.cleanup = cleanup
        self.pathSpec = path
        self.pathDescriptors = PathDescriptors.shared
        self.uncheckedSince = unchecked ? monotonicNanoseconds() : 0
        if unchecked {
            UncheckedPaths.add(self)
        } else {
            checkPath()
        }
    }

    /// An fd channel: validates `fd` (fstat, and lseek for a random channel)
    /// and attaches to the fd's shared entry.
    static func target(fd: Int32, kind: IOChannel.Kind) -> Target {
        switch describe(fd: fd) {
        case .failure(let error):
            return .failed(error)
        case .success(let (fileKind, identity)):
            if let error = fileKind.unusable(for: kind) { return .failed(error) }
            switch randomBase(fd: fd, kind: kind) {
            case .failure(let error):
                return .failed(error)
            case .success(let base):
                return .entry(FDEntry.attach(fd: fd, kind: fileKind, identity: identity), base: base)
            }
        }
    }

    /// Where a random channel's offsets count from: the file position now
    /// (0 for a stream channel, which does not use it).
    private static func randomBase(fd: Int32, kind: IOChannel.Kind) -> Result<Int64, Errno> {
        guard kind == .random else { return .success(0) }
        return Result { () throws(Errno) in try Syscall.lseek(fd, 0, SEEK_CUR) }
    }

    /// A path channel's check or open error; `nil` while it works, and for fd channels.
    package var pathFailure: Errno? {
        guard pathSpec != nil else { return nil }
        return lock.withLock { lifecycle.failure }
    }

    /// Why a path channel's reopen failed, in words, when the errno does
    /// not say it (the path names another file now).
    package var pathFailureDetail: String? {
        guard pathSpec != nil else { return nil }
        return lock.withLock { reopenDetail }
    }

    /// What a channel made from this one starts from (`IOChannel(kind:channel:)`).
    func derive(kind newKind: IOChannel.Kind) -> (Target?, PathSpec?) {
        lock.withLock { () -> (Target?, PathSpec?) in
            if lifecycle.isClosed { return (.failed(.canceled), nil) }
            switch lifecycle.target {
            case .failed(let error):
                return (.failed(error), nil)
            case .unopened:
                return (nil, pathSpec)
            case .open(let entry, _):
                if let pathSpec { return (nil, pathSpec) }
                if let error = entry.kind.unusable(for: newKind) { return (.failed(error), nil) }
                switch Self.randomBase(fd: entry.fd, kind: newKind) {
                case .failure(let error):
                    return (.failed(error), nil)
                case .success(let base):
                    guard entry.attachChannel() else { return (.failed(.canceled), nil) }
                    return (.entry(entry, base: base), nil)
                }
            }
        }
    }

    // MARK: - settings

    func setHighWater(_ bytes: Int) {
        lock.withLock {
            let high = Swift.max(bytes, 1)
            if let low = settings.low, low > bytes { settings.low = Swift.max(bytes, 0) }
            settings.high = high
        }
    }

    func setLowWater(_ bytes: Int) {
        lock.withLock {
            let low = Swift.max(bytes, 0)
            if settings.high < low { settings.high = Swift.max(low, 1) }
            settings.low = low
        }
    }

    func setInterval(_ interval: Duration, strict: Bool) {
        lock.withLock {
            settings.interval = interval > .zero ? interval : nil
            settings.strictInterval = strict
        }
    }

    func setDirectMode(_ mode: IOChannel.DirectIO) {
        lock.withLock { settings.directIO = mode }
    }

    /// The entry of an open channel.
    var currentEntry: FDEntry? {
        lock.withLock {
            settleFlagsLocked()
            return lifecycle.currentEntry
        }
    }

    /// The fd the user asks for: a path channel that shows it never lets
    /// go of it.
    var fileDescriptor: FileDescriptor? {
        let (entry, stalled) = lock.withLock { () -> (FDEntry?, PathDescriptors.Work) in
            settleFlagsLocked()
            let entry = lifecycle.pin()
            guard entry != nil && pathSpec != nil else { return (entry, .init()) }
            return (entry, PathDescriptors.shared.forget(self, closing: false))
        }
        PathDescriptors.shared.perform(stalled)
        return entry.map { FileDescriptor(rawValue: $0.fd) }
    }

    /// The fd of an open channel, for the library's own use where the
    /// channel cannot let go of it meanwhile (inside a barrier): it does
    /// not pin it.
    var currentDescriptor: Int32? {
        currentEntry?.fd
    }

    // MARK: - operations

    @discardableResult
    package func submit(direction: ChannelOperation.Direction, offset: Int64, length: Int, data: DataChunk,
                queue opQueue: IOQueue, options: OperationOptions = .init(),
                handler: @escaping IOChannel.Handler) -> ChannelOperation {
        touch()
        lock.lock()
        let operation = ChannelOperation(direction: direction, isStream: kind == .stream, queue: opQueue,
                                         engine: engine, settings: settings, offset: offset, length: length,
                                         data: data, options: options, channel: self,
                                         handler: handler)
        let unchecked = lifecycle.target.isUnchecked
        let action = lifecycle.submit(operation, length: length)
        let checkNow = unchecked && !lifecycle.target.isUnchecked
        switch action {
        case .finishWithoutIO(let error):
            lock.unlock()
            operation.finishWithoutIO(error)
        case .enqueue(let entry, let base):
            settleFlagsLocked()
            insertActiveLocked(operation)
            let ready = operation.enqueue(on: entry, base: base)
            lock.unlock()
            entry.start(ready, submitting: operation)
        case .deferred(let openNow):
            insertActiveLocked(operation)
            lock.unlock()
            if checkNow { checkPath() }
            if openNow { openPath() }
        }
        return operation
    }

    /// An awaited operation to carry out on the caller's thread
    /// (ChannelCore+Inline.swift): the open channel's entry, where `eligible`
    /// allows, with the operation begun on it (`FDEntry.beginInline`), and
    /// the random channel's base. `nil`: submit it as usual (a path not open
    /// yet, a closed or failed channel, direct I/O asked for, something
    /// queued ahead of it on the fd). A path channel's read whose file is
    /// not open opens it first, on this thread, where that cannot block.
    /// `handlerLength`: a handler read of that many bytes, which must come
    /// in one handler call (the high-water mark allows it, no interval).
    func beginInline(isWrite: Bool, handlerLength: Int? = nil,
                     _ eligible: (FDEntry) -> Bool) -> (entry: FDEntry, base: Int64)? {
        touch()
        lock.lock()
        defer { lock.unlock() }
        if let handlerLength, settings.high < handlerLength || settings.interval != nil { return nil }
        // A path channel's read opens its file here, where that cannot
        // block (ChannelCore+Path.swift), and then goes on as on an fd.
        if !isWrite && mayOpenNowLocked() && lifecycle.beginOpenNow() {
            lock.unlock()
            openPathNow()
            lock.lock()
        }
        // (A write must not see the `O_NONBLOCK` a read's open left.)
        if isWrite { settleFlagsLocked() }
        guard settings.directIO == .off, !lifecycle.isClosed, case .open(let entry, let base) = lifecycle.target,
              eligible(entry),
              entry.beginInline(stream: kind == .stream, isWrite: isWrite, handler: handlerLength != nil) else { return nil }
        return (entry, base)
    }

    func barrier(_ work: @escaping @Sendable () -> Void) {
        touch()
        lock.lock()
        let unchecked = lifecycle.target.isUnchecked
        let action = lifecycle.barrier(work)
        let checkNow = unchecked && !lifecycle.target.isUnchecked
        switch action {
        case .enqueue(let entry):
            settleFlagsLocked()
            let ready = entry.enqueueBarrier(queue: queue, work)
            lock.unlock()
            entry.start(ready)
        case .deferred(let openNow):
            lock.unlock()
            if checkNow { checkPath() }
            if openNow { openPath() }
        case .runNow:
            lock.unlock()
            queue.async(work)
        }
    }

    /// The operations' bytes requested but not yet handled (for tests).
    var readAheadBytes: Int {
        let ops = lock.withLock { activeLocked() }
        return ops.reduce(0) { $0 + $1.readAheadBytes }
    }

    /// An operation's last handler call returned.
    func operationEnded(_ operation: ChannelOperation) {
        lock.withLock { removeActiveLocked(operation) }
    }

    /// An operation's last handler call returned, and its entry knows it.
    func operationLeftEntry() {
        releaseUnderPressure()
    }

    private func insertActiveLocked(_ operation: ChannelOperation) {
        operation.isActive = true
        operation.activeNext = activeHead
        activeHead?.activePrevious = operation
        activeHead = operation
    }

    private func removeActiveLocked(_ operation: ChannelOperation) {
        guard operation.isActive else { return }
        operation.isActive = false
        let next = operation.activeNext
        if let previous = operation.activePrevious {
            previous.activeNext = next
        } else {
            activeHead = next
        }
        next?.activePrevious = operation.activePrevious
        operation.activeNext = nil
        operation.activePrevious = nil
    }

    /// The active operations, newest first.
    private func activeLocked() -> [ChannelOperation] {
        var ops: [ChannelOperation] = []
        var cursor = activeHead
        while let op = cursor {
            ops.append(op)
            cursor = op.activeNext
        }
        return ops
    }

    /// Task cancellation of `operation`: an operation still waiting for its
    /// path to open (a FIFO with no other end blocks there) ends at once with
    /// `ECANCELED`, as `close(stop: true)` ends it; any other is stopped.
    func cancel(_ operation: ChannelOperation) {
        switch lock.withLock({ lifecycle.cancel(operation) }) {
        case .finishWithoutIO(let cleanupNow):
            operation.finishWithoutIO(.canceled)
            if cleanupNow { runCleanup(nil) }
        case .stop:
            operation.stop()
        }
    }

    // MARK: - close

    func close(stop: Bool) {
        lock.lock()
        let actions = lifecycle.close(stop: stop)
        let toStop = actions.stopActive ? activeLocked() : []
        // (A path channel's entry closes its fd once its handlers return.)
        let stalled = pathSpec == nil ? .init() : PathDescriptors.shared.forget(self, closing: actions.closeEntry != nil)
        // (A held fd stays while an open that replaces it may still come.)
        let held = lifecycle.opensNoMore ? takeHeldLocked() : nil
        lock.unlock()
        if let held { Syscall.closeIgnoringErrors(held) }
        PathDescriptors.shared.perform(stalled)
        for op in actions.cancel { op.finishWithoutIO(.canceled) }
        for op in toStop { op.stop() }
        if let entry = actions.closeEntry { entry.channelClosed(cleanup: .init(queue: queue, handler: cleanup)) }
        if actions.cleanupNow { runCleanup(nil) }
    }

    /// Runs the cleanup handler on the channel's queue (the lifecycle
    /// handed it off: once).
    func runCleanup(_ error: Errno?) {
        guard let cleanup = self.cleanup else { return }
        queue.async { cleanup(error) }
    }
}
