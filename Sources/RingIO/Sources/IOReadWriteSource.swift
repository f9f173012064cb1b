#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// A read source: the handler runs while the fd is readable;
/// ``IOSource/data`` estimates the bytes available (`FIONREAD`), 0 at end of
/// file (a pipe whose writer closed).
///
/// Level-triggered: while the fd stays readable and the handler did not
/// drain it, the handler is called again. The watch is an entry in the
/// queue workers' epoll set (no thread per source: an idle worker waits on
/// every watched fd and runs the handler itself) on a dup of the fd. Close
/// the fd in the cancel handler, not before.
///
/// ```swift
/// let fds = try FileDescriptor.pipe()
/// let reader = IOReadSource(fileDescriptor: fds.readEnd, queue: IOQueue(label: "r"))
/// reader.setEventHandler {
///     var buffer = [UInt8](repeating: 0, count: Int(max(reader.data, 1)))
///     let n = (try? buffer.withUnsafeMutableBytes { try fds.readEnd.read(into: $0) }) ?? 0
///     if n == 0 { reader.cancel() }  // end of file
/// }
/// reader.setCancelHandler { try? fds.readEnd.close() }
/// reader.activate()
/// ```
///
/// The corresponding libdispatch type is `DISPATCH_SOURCE_TYPE_READ`.
public final class IOReadSource: IOSource, @unchecked Sendable {
    // @unchecked: `watcher` is set once, by `register`, before any event;
    // the rest is immutable.
    let readiness: Readiness

    /// Creates an inactive read source on `fileDescriptor` (which stays
    /// the caller's: the source never closes it).
    ///
    /// - Parameters:
    ///   - fileDescriptor: the fd to watch (a pipe, socket, tty, FIFO,
    ///     eventfd, or a regular file, which is always readable).
    ///   - queue: where the handlers run.
    ///   - engine: whose ring (or readiness loop) watches an fd that
    ///     epoll cannot (a regular file).
    public init(fileDescriptor: FileDescriptor, queue: IOQueue, engine: IOEngine = .shared) {
        readiness = Readiness(fd: fileDescriptor.rawValue, events: Int16(POLLIN), engine: engine)
        super.init(queue: queue, merge: .level)
    }

    override func register() -> Errno? { readiness.start(self) }
    override func unregister() { readiness.stop() }
    override func afterDelivery() { readiness.lookAgain(self) }

    override func prepareDelivery(_ merged: UInt) -> UInt? {
        // Bytes queued: readable, and that is the estimate (one system
        // call; the poll below only tells the end of file from nothing).
        if let queued = try? Syscall.bytesReadable(readiness.fd), queued > 0 { return UInt(queued) }
        let ready = Syscall.readyEvents(readiness.fd, Int16(POLLIN))
        guard ready & Int16(POLLIN | POLLHUP | POLLERR) != 0, ready & Int16(POLLNVAL) == 0 else { return nil }
        // FIONREAD: 0 on a readable fd is the end of file (or a listening
        // socket's pending connection); a file without it: 1.
        return UInt((try? Syscall.bytesReadable(readiness.fd)) ?? 1)
    }
}

/// A write source: the handler runs while the fd is writable;
/// ``IOSource/data`` estimates the room (a pipe's free bytes; 1 where the
/// kernel gives no estimate).
///
/// Level-triggered, like ``IOReadSource``.
///
/// The corresponding libdispatch type is `DISPATCH_SOURCE_TYPE_WRITE`.
public final class IOWriteSource: IOSource, @unchecked Sendable {
    // @unchecked: see IOReadSource.
    let readiness: Readiness

    /// Creates an inactive write source on `fileDescriptor` (which stays
    /// the caller's).
    ///
    /// - Parameters:
    ///   - fileDescriptor: the fd to watch.
    ///   - queue: where the handlers run.
    ///   - engine: whose ring (or readiness loop) watches an fd that
    ///     epoll cannot (a regular file).
    public init(fileDescriptor: FileDescriptor, queue: IOQueue, engine: IOEngine = .shared) {
        readiness = Readiness(fd: fileDescriptor.rawValue, events: Int16(POLLOUT), engine: engine)
        super.init(queue: queue, merge: .level)
    }

    override func register() -> Errno? { readiness.start(self) }
    override func unregister() { readiness.stop() }
    override func afterDelivery() { readiness.lookAgain(self) }

    override func prepareDelivery(_ merged: UInt) -> UInt? {
        let ready = Syscall.readyEvents(readiness.fd, Int16(POLLOUT))
        guard ready & Int16(POLLOUT | POLLERR | POLLHUP) != 0, ready & Int16(POLLNVAL) == 0 else { return nil }
        if let capacity = try? Syscall.pipeCapacity(readiness.fd) {
            let queued = (try? Syscall.bytesReadable(readiness.fd)) ?? 0
            return UInt(Swift.max(1, capacity - queued))
        }
        return 1
    }
}

/// The readiness watch of a read or write source: a one-shot entry in the
/// worker pool's epoll set (`PoolWatch`: the idle worker the kernel wakes
/// runs the handler, one wake-up per readiness), or, for an fd epoll cannot
/// watch (a regular file: `EPERM`) or when the pool has no epoll instance,
/// the engine's poll (`FDWatch`).
final class Readiness: Sendable {
    private enum Watch {
        case pool(PoolWatch)
        case engine(FDWatch)

        func stop() {
            switch self {
            case .pool(let w): w.stop()
            case .engine(let w): w.stop()
            }
        }

        func rearm() {
            switch self {
            case .pool(let w): w.arm()
            case .engine(let w): w.rearmIfEnded()
            }
        }
    }

    private struct Watching {
        var watch: Watch?
        /// The source, from `start` to `stop` (a strong reference: a weak
        /// one gave the source a side table, which made each of its
        /// retains and releases take the slow path). The cycle through
        /// the watch ends at `stop`, which `cancel` calls; an active source
        /// keeps itself alive until then anyway.
        var source: IOSource?
        var stopped = false
    }

    let fd: Int32
    let events: Int16
    let engine: IOEngine
    private let watching = Locked(Watching())

    init(fd: Int32, events: Int16, engine: IOEngine) {
        self.fd = fd
        self.events = events
        self.engine = engine
    }

    func start(_ source: IOSource) -> Errno? {
        do throws(Errno) {
            try Syscall.checkOpen(fd)
        } catch {
            return error
        }
        watching.withLock { $0.source = source }
        // A stopped source's last readiness finds nothing.
        let onReady: @Sendable () -> Void = { [self] in watching.withLock { $0.source }?.mergeEvent(1) }
        let watch: Watch
        do throws(Errno) {
            watch = .pool(try WorkerPool.shared.watch(fd: fd, events: UInt32(UInt16(bitPattern: events))) { _ in
                onReady()
            })
        } catch .badFileDescriptor {
            return .badFileDescriptor
        } catch {
            let w = FDWatch(engine: engine, fd: fd, events: events, rearmAtOnce: false, onReady: { _ in onReady() })
            w.rearmIfEnded()
            watch = .engine(w)
        }
        let stopNow = watching.withLock { w -> Bool in
            if w.stopped { return true }
            w.watch = watch
            return false
        }
        if stopNow { watch.stop() }  // cancelled meanwhile
        return nil
    }

    func stop() {
        let (watch, source) = watching.withLock { w -> (Watch?, IOSource?) in
            w.stopped = true
            defer {
                w.source = nil
                w.watch = nil
            }
            return (w.watch, w.source)
        }
        watch?.stop()
        withExtendedLifetime(source) {}  // released outside the lock
    }

    /// After a delivery: still ready → deliver again; else make sure a
    /// watch is armed for the next readiness.
    func lookAgain(_ source: IOSource) {
        let ready = Syscall.readyEvents(fd, events | Int16(POLLHUP))
        if ready & Int16(POLLNVAL) != 0 { return }  // closed under the source: stays quiet
        if ready & (events | Int16(POLLHUP | POLLERR)) != 0 {
            source.mergeEvent(1)
        } else {
            watching.withLock { $0.watch }?.rearm()
        }
    }
}
