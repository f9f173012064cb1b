#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
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
}

/// The state of one channel, shared with its operations; `IOChannel` is the
/// public face that closes it when released.
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

    private enum Deferred {
        case operation(ChannelOperation)
        case barrier(@Sendable () -> Void)
    }

    let kind: IOChannel.Kind
    package let queue: IOQueue
    package let engine: IOEngine
    let cleanup: @Sendable (Errno?) -> Void
    let pathSpec: PathSpec?

    private let lock = PlainLock()
    private var target: Target
    private var settings = ChannelSettings()
    private var closed = false
    private var stopped = false
    /// The cleanup handler ran, or was handed to the entry: never twice.
    private var cleanupHandedOff = false
    /// The operations whose last handler call has not returned: an intrusive
    /// list through their `activeNext`/`activePrevious` (no hashing, no
    /// allocation per operation).
    private var activeHead: ChannelOperation?
    // Path channels only.
    private var checked = false
    private var opening = false
    private var deferred: [Deferred] = []

    /// A channel on an fd (or on an entry of another channel), or a failed one.
    init(kind: IOChannel.Kind, target: Target, queue: IOQueue, engine: IOEngine,
         cleanup: @escaping @Sendable (Errno?) -> Void) {
        self.kind = kind
        self.target = target
        self.queue = queue
        self.engine = engine
        self.cleanup = cleanup
        self.pathSpec = nil
        if case .failed(let error) = target {
            cleanupHandedOff = true
            queue.async { cleanup(error) }
        }
    }

    /// A path channel; checks the path at once, opens it on first use.
    init(kind: IOChannel.Kind, path: PathSpec, queue: IOQueue, engine: IOEngine,
         cleanup: @escaping @Sendable (Errno?) -> Void) {
        self.kind = kind
        self.target = .unopened
        self.queue = queue
        self.engine = engine
        self.cleanup = cleanup
        self.pathSpec = path
        checkPath()
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
        let position = lseek(fd, 0, SEEK_CUR)
        return position < 0 ? .failure(Errno(rawValue: cliburing_errno())) : .success(Int64(position))
    }

    /// A path channel's check or open error; `nil` while it works, and for fd channels.
    package var pathFailure: Errno? {
        guard pathSpec != nil else { return nil }
        return lock.withLock { () -> Errno? in
            if case .failed(let error) = target { return error }
            return nil
        }
    }

    /// What a channel made from this one starts from (`IOChannel(kind:channel:)`).
    func derive(kind newKind: IOChannel.Kind) -> (Target?, PathSpec?) {
        lock.withLock { () -> (Target?, PathSpec?) in
            if closed { return (.failed(.canceled), nil) }
            switch target {
            case .failed(let error):
                return (.failed(error), nil)
            case .unopened:
                return (nil, pathSpec)
            case .entry(let entry, _):
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
            if closed { return nil }
            if case .entry(let entry, _) = target { return entry }
            return nil
        }
    }

    var fileDescriptor: FileDescriptor? {
        lock.withLock {
            if closed { return nil }
            if case .entry(let entry, _) = target { return FileDescriptor(rawValue: entry.fd) }
            return nil
        }
    }

    // MARK: - operations

    @discardableResult
    package func submit(direction: ChannelOperation.Direction, offset: Int64, length: Int, data: DataChunk,
                queue opQueue: IOQueue, options: OperationOptions = .init(),
                handler: @escaping IOChannel.Handler) -> ChannelOperation {
        lock.lock()
        let operation = ChannelOperation(direction: direction, isStream: kind == .stream, queue: opQueue,
                                         engine: engine, settings: settings, offset: offset, length: length,
                                         data: data, options: options, channel: self,
                                         handler: handler)
        var immediate: Errno?? = nil  // .some(error or nil): finish without I/O
        var ready: (FDEntry, FDEntry.Ready)?
        var open = false
        if closed {
            immediate = .some(.canceled)
        } else if case .failed(let error) = target {
            immediate = .some(error)
        } else if length == 0 {
            immediate = .some(nil)
        } else {
            insertActiveLocked(operation)
            switch target {
            case .entry(let entry, let base):
                ready = (entry, operation.enqueue(on: entry, base: base))
            case .unopened:
                deferred.append(.operation(operation))
                open = startOpenIfNeededLocked()
            case .failed:
                break
            }
        }
        lock.unlock()
        if let immediate { operation.finishWithoutIO(immediate) }
        if let (entry, items) = ready { entry.start(items) }
        if open { openPath() }
        return operation
    }

    func barrier(_ work: @escaping @Sendable () -> Void) {
        lock.lock()
        var ready: (FDEntry, FDEntry.Ready)?
        var runNow = false
        var open = false
        switch target {
        case .entry(let entry, _):
            ready = (entry, entry.enqueueBarrier(queue: queue, work))
        case .unopened where !closed:
            deferred.append(.barrier(work))
            open = startOpenIfNeededLocked()
        case .unopened, .failed:
            runNow = true
        }
        lock.unlock()
        if runNow { queue.async(work) }
        if let (entry, items) = ready { entry.start(items) }
        if open { openPath() }
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
        let waitingForOpen = lock.withLock { () -> Bool in
            guard let index = deferred.firstIndex(where: {
                if case .operation(let op) = $0 { return op === operation }
                return false
            }) else { return false }
            deferred.remove(at: index)
            return true
        }
        if waitingForOpen { operation.finishWithoutIO(.canceled) } else { operation.stop() }
    }

    // MARK: - close

    func close(stop: Bool) {
        lock.lock()
        var toStop: [ChannelOperation] = []
        var cancelled: [Deferred] = []
        if stop && !stopped {
            stopped = true
            toStop = activeLocked()
            cancelled = deferred.filter { if case .operation = $0 { return true } else { return false } }
            deferred.removeAll { if case .operation = $0 { return true } else { return false } }
        }
        var closeEntry: FDEntry?
        var cleanupNow = false
        if !closed {
            closed = true
            switch target {
            case .entry(let entry, _):
                if !cleanupHandedOff {
                    cleanupHandedOff = true
                    closeEntry = entry
                }
            case .unopened:
                if !opening && deferred.isEmpty && !cleanupHandedOff {
                    cleanupHandedOff = true
                    cleanupNow = true
                }
            case .failed:
                break
            }
        }
        lock.unlock()
        for case .operation(let op) in cancelled { op.finishWithoutIO(.canceled) }
        for op in toStop { op.stop() }
        if let closeEntry { closeEntry.channelClosed(cleanup: .init(queue: queue, handler: cleanup)) }
        if cleanupNow {
            let cleanup = self.cleanup
            queue.async { cleanup(nil) }
        }
    }

    // MARK: - path channels

    /// With the lock held: whether the caller must start opening the file now.
    private func startOpenIfNeededLocked() -> Bool {
        guard checked, !opening, case .unopened = target, !deferred.isEmpty else { return false }
        opening = true
        return true
    }

    /// The asynchronous check of a path channel's path (statx; with `.create`
    /// and no file, its directory).
    private func checkPath() {
        guard let spec = pathSpec else { return }
        let follow = !spec.options.contains(.noFollow)
        Probe.statx(engine: engine, path: spec.path, follow: follow) { [self] result in
            switch result {
            case .success(let fileKind):
                if let error = fileKind.unusable(for: kind) { return pathFailed(error) }
                pathChecked()
            case .failure(.noSuchFileOrDirectory) where spec.options.contains(.create):
                Probe.statx(engine: engine, path: spec.path.removingLastComponent(), follow: true) { [self] parent in
                    switch parent {
                    case .success(.directory): pathChecked()
                    case .success: pathFailed(.notDirectory)
                    case .failure(let error): pathFailed(error)
                    }
                }
            case .failure(let error):
                pathFailed(error)
            }
        }
    }

    private func pathChecked() {
        let open = lock.withLock { () -> Bool in
            checked = true
            return startOpenIfNeededLocked()
        }
        if open { openPath() }
    }

    private func openPath() {
        guard let spec = pathSpec else { return }
        let permissions = spec.permissions?.rawValue ?? 0o666
        Probe.open(engine: engine, path: spec.path, flags: spec.openFlags, mode: UInt32(permissions)) { [self] result in
            switch result {
            case .failure(let error):
                pathFailed(error)
            case .success(let fd):
                switch describe(fd: fd) {
                case .failure(let error):
                    _ = Glibc.close(fd)
                    pathFailed(error)
                case .success(let (fileKind, _)):
                    // The file may have changed since the check.
                    if let error = fileKind.unusable(for: kind) {
                        _ = Glibc.close(fd)
                        return pathFailed(error)
                    }
                    pathOpened(FDEntry.owning(fd: fd, kind: fileKind))
                }
            }
        }
    }

    private func pathOpened(_ entry: FDEntry) {
        lock.lock()
        target = .entry(entry, base: 0)
        opening = false
        let pending = deferred
        deferred = []
        var ready = FDEntry.Ready()
        for item in pending {
            switch item {
            case .operation(let op): ready += op.enqueue(on: entry, base: 0)
            case .barrier(let work): ready += entry.enqueueBarrier(queue: queue, work)
            }
        }
        var handOff = false
        if closed && !cleanupHandedOff {
            cleanupHandedOff = true
            handOff = true
        }
        lock.unlock()
        entry.start(ready)
        if handOff { entry.channelClosed(cleanup: .init(queue: queue, handler: cleanup)) }
    }

    private func pathFailed(_ error: Errno) {
        lock.lock()
        target = .failed(error)
        opening = false
        checked = true
        let pending = deferred
        deferred = []
        let runCleanup = !cleanupHandedOff
        cleanupHandedOff = true
        lock.unlock()
        for item in pending {
            switch item {
            case .operation(let op): op.finishWithoutIO(error)
            case .barrier(let work): queue.async(work)
            }
        }
        if runCleanup {
            let cleanup = self.cleanup
            queue.async { cleanup(error) }
        }
    }
}

/// One-request helpers for the path channels: statx and openat through the
/// engine, the path and statx buffer kept alive in a `RequestMemory` until
/// completion.
enum Probe {
    static func statx(engine: IOEngine, path: FilePath, follow: Bool,
                      _ completion: @escaping @Sendable (Result<FileKind, Errno>) -> Void) {
        let memory = RequestMemory(paths: [path], statx: true)
        let flags = follow ? 0 : AT_SYMLINK_NOFOLLOW
        engine.submit(IORequest(.statx(directory: AT_FDCWD, path: memory.paths[0], flags: flags,
                                       mask: UInt32(STATX_TYPE), buffer: memory.statx!), owner: memory) { res in
            if res < 0 { return completion(.failure(Errno(rawValue: -res))) }
            completion(.success(FileKind(mode: mode_t(memory.statx!.pointee.stx_mode))))
        })
    }

    static func open(engine: IOEngine, path: FilePath, flags: Int32, mode: UInt32,
                     _ completion: @escaping @Sendable (Result<Int32, Errno>) -> Void) {
        let memory = RequestMemory(paths: [path])
        engine.submit(IORequest(.openat(directory: AT_FDCWD, path: memory.paths[0], flags: flags, mode: mode),
                                owner: memory, mayBlock: true) { res in
            completion(res < 0 ? .failure(Errno(rawValue: -res)) : .success(res))
        })
    }
}
