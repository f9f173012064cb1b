#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import SystemPackage
import RingIOBase
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// Watches a process: `.exit` fires once when it ends, whether it is a
/// child of this process or not.
///
/// The watch is a pidfd (Linux 5.3) polled through the engine. The source
/// never reaps a child: the program's own `waitpid` still works, and
/// ``exitStatus`` reads the status without reaping it. A process that is
/// already gone when the source is activated (ended and reaped, or never
/// there) delivers `.exit` once, with no status.
///
/// ```swift
/// let watcher = IOProcessSource(processID: getppid(), queue: IOQueue(label: "parent"))
/// watcher.setEventHandler { print("the parent is gone"); watcher.cancel() }
/// watcher.activate()
/// ```
public final class IOProcessSource: IOSource, @unchecked Sendable {
    // @unchecked: `watch`, `pidfd` and `status` are Locked/Atomic; the rest
    // is immutable.

    /// What a process source reports.
    public struct Event: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The process ended. `NOTE_EXIT` in libdispatch.
        public static let exit = Event(rawValue: 0x8000_0000)
    }

    private let processID: pid_t
    private let wanted: Event
    private let engine: IOEngine
    private let watch = Locked<(watch: FDWatch?, fd: Int32)>((nil, -1))
    private let status = Atomic<Int64>(-1)
    /// `.exit` was reported: the pidfd's later wake-ups (the parent's
    /// `waitpid` reaping the child wakes a multishot poll again) are not.
    private let exited = Atomic<Bool>(false)

    /// Creates an inactive source for process `processID`.
    ///
    /// - Parameters:
    ///   - processID: the process to watch.
    ///   - events: what to report (`.exit`).
    ///   - queue: where the handlers run.
    ///   - engine: whose ring (or readiness loop) polls the pidfd.
    public init(processID: pid_t, events: Event = .exit, queue: IOQueue, engine: IOEngine = .shared) {
        self.processID = processID
        self.wanted = events
        self.engine = engine
        super.init(queue: queue, merge: .or)
    }

    /// After `.exit`: the raw wait status of a child of this process (decode
    /// it as `waitpid`'s: exit code in bits 8-15, or the terminating signal);
    /// nil for a process that is not our child, or before it ended.
    public var exitStatus: Int32? {
        let s = status.load(ordering: .acquiring)
        return s < 0 ? nil : Int32(s)
    }

    override func register() -> Errno? {
        guard wanted.contains(.exit) else { return nil }
        let fd: Int32
        do throws(Errno) {
            fd = try Syscall.pidfdOpen(processID)
        } catch .noSuchProcess {
            // Already gone (and reaped): one `.exit`, after the registration handler.
            exited.store(true, ordering: .releasing)
            mergeEvent(Event.exit.rawValue)
            return nil
        } catch {
            return error
        }
        let w = FDWatch(engine: engine, fd: fd, events: Int16(POLLIN), rearmAtOnce: false,
                        onReady: { [weak self] _ in self?.ended() },
                        onError: { [weak self] _ in self?.ended() })
        watch.withLock { $0 = (w, fd) }
        w.rearmIfEnded()
        return nil
    }

    override func unregister() {
        let (w, fd) = watch.withLock { s -> (FDWatch?, Int32) in
            defer { s = (nil, -1) }
            return s
        }
        w?.stop()
        if fd >= 0 { Syscall.closeIgnoringErrors(fd) }
    }

    /// The engine's thread: the pidfd is readable, the process ended.
    private func ended() {
        guard !exited.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let fd = watch.withLock { $0.fd }
        if fd >= 0, let raw = try? Syscall.waitStatus(pidfd: fd) {
            status.store(Int64(raw), ordering: .releasing)
        }
        mergeEvent(Event.exit.rawValue)
    }
}
