#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// Counts a signal: ``IOSource/data`` is the number received since the last
/// delivery. While a source watches a signal, the signal's default action
/// (or handler) does not run.
///
/// The signal is read from a signalfd through the engine (one per engine,
/// whatever the number of sources and signals). For that the signal must
/// be blocked in every thread it could land on:
/// - The library's own threads block every asynchronous signal.
/// - The thread that creates (activates) the source blocks it; create
///   signal sources early, on the main thread, before starting threads of
///   your own, so that those inherit the blocked mask (as Apple's guide
///   says for `signal(SIG, SIG_IGN)`).
/// - A signal that still lands on a thread that does not block it (a
///   thread started earlier, one of the Swift runtime's) meets the action
///   the source installs, which forwards it to the engine's thread: it is
///   still counted, a few microseconds later.
///
/// Standard signals sent faster than they are read merge in the kernel
/// (one stays pending), so `data` may count fewer than were sent. Several
/// sources for one signal each count it. Two engines watching one signal
/// share it (each signal goes to one of them): watch a signal on one engine.
///
/// ```swift
/// let hangUp = IOSignalSource(signal: SIGHUP, queue: IOQueue(label: "signals"))
/// hangUp.setEventHandler { print("SIGHUP x\(hangUp.data): reloading") }
/// hangUp.activate()
/// ```
///
/// The corresponding libdispatch type is `DISPATCH_SOURCE_TYPE_SIGNAL`.
public final class IOSignalSource: IOSource, @unchecked Sendable {
    // @unchecked: `signal` and `engine` are immutable.
    private let signal: Int32
    private let engine: IOEngine

    /// Creates an inactive source for `signal`.
    ///
    /// - Parameters:
    ///   - signal: the signal (`SIGINT`, `SIGHUP`, `SIGUSR1`, ...); SIGKILL
    ///     and SIGSTOP cannot be watched (``IOSource/registrationError``
    ///     says `EINVAL`).
    ///   - queue: where the handlers run.
    ///   - engine: whose thread reads the signalfd.
    public init(signal: Int32, queue: IOQueue, engine: IOEngine = .shared) {
        self.signal = signal
        self.engine = engine
        super.init(queue: queue, merge: .add)
    }

    override func register() -> Errno? { SignalHub.of(engine).add(self, signal: signal) }
    override func unregister() { SignalHub.of(engine).remove(self, signal: signal) }
}
