#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine

/// An engine's signal sources: one signalfd for every watched signal (a
/// `SourceHub`), read by the engine's thread when the ring (or the
/// readiness loop) reports it readable.
///
/// ```
///  kill(pid, SIG) ──▶ a thread that blocks SIG? ─ yes ─▶ pending ──▶ signalfd readable
///                          │ no (a thread the library did not start)      │ ring poll
///                          ▼                                              ▼
///                 forwarding action: tgkill(engine thread, SIG)   read on the engine thread
///                                                                 → mergeEvent(count) per source
/// ```
///
/// A signalfd reports only signals that are blocked where they land: the
/// library's threads block every asynchronous signal from birth, the
/// thread that creates a source blocks its signal, and a signal that still
/// lands on a thread that does not block it (one the program or the Swift
/// runtime started) meets the forwarding action, which sends it on to the
/// engine thread that reads the signalfd (there it is blocked, so it stays
/// pending until the read). The action replaces the signal's disposition
/// while sources watch it (its default action never runs) and the old one
/// comes back when the last source of the signal is cancelled.
final class SignalHub: @unchecked Sendable {
    // @unchecked: `mask` and `savedActions` are touched only inside the
    // hub's lock (the closures `SourceHub.add` and `remove` run under it);
    // `hub` and `engine` are immutable.
    private unowned(unsafe) let engine: IOEngine
    // `unowned(unsafe)`: the engine holds the hub (an attachment) for its
    // whole life; the hub is used only by sources, which hold the engine.
    private let hub: SourceHub<IOSignalSource>
    private var mask = sigset_t()
    private var savedActions: [Int32: sigaction] = [:]

    init(engine: IOEngine) {
        self.engine = engine
        sigemptyset(&mask)
        hub = SourceHub(engine: engine, makeFD: { () throws(Errno) in
            var empty = sigset_t()
            sigemptyset(&empty)
            return try Syscall.signalfd(-1, &empty)
        }, bufferSize: 16 * MemoryLayout<signalfd_siginfo>.stride, parse: { buffer, events in
            for i in 0..<(buffer.count / MemoryLayout<signalfd_siginfo>.stride) {
                let info = buffer.loadUnaligned(fromByteOffset: i * MemoryLayout<signalfd_siginfo>.stride,
                                                as: signalfd_siginfo.self)
                events.append(.init(key: Int32(info.ssi_signo), value: 1))
            }
        }, deliver: { source, count in source.mergeEvent(UInt(count)) })
    }

    deinit {
        // Sources hold the engine, so none is left: every action was given back.
        for (signal, var old) in savedActions { Syscall.restoreSignal(signal, &old) }
    }

    static func of(_ engine: IOEngine) -> SignalHub {
        engine.attachment(SignalHub.self) { SignalHub(engine: engine) }
    }

    /// Starts counting `signal` for `source`.
    func add(_ source: IOSignalSource, signal: Int32) -> Errno? {
        guard signal > 0, signal < 65, signal != SIGKILL, signal != SIGSTOP else { return .invalidArgument }
        Syscall.blockSignalOnThisThread(signal)
        let added = hub.add(source) { (fd) throws(Errno) -> Int32 in
            var newMask = mask
            sigaddset(&newMask, signal)
            _ = try Syscall.signalfd(fd, &newMask)
            mask = newMask
            return signal
        }
        if case .failure(let error) = added { return error }
        // The thread that reads the signalfd: the ring thread, or the
        // readiness loop (which the hub's watch starts).
        let tid = engine.watchThreadID(timeoutNanoseconds: 1_000_000_000)
        guard tid != 0 else {
            remove(source, signal: signal)
            return .resourceTemporarilyUnavailable
        }
        var error: Errno?
        // Under the hub's lock (a `register` that adds no key), beside the
        // other changes of `savedActions`.
        hub.withLock { [self] hasKey in
            // (Not when its sources were all cancelled meanwhile.)
            if savedActions[signal] != nil || !hasKey(signal) { return }
            var old = sigaction()
            do throws(Errno) {
                try Syscall.forwardSignal(signal, to: tid, saving: &old)
                savedActions[signal] = old
            } catch let e {
                error = e
            }
        }
        return error
    }

    /// Stops counting `signal` for `source`; the last source of a signal
    /// gives the signal its old action back.
    func remove(_ source: IOSignalSource, signal: Int32) {
        hub.remove(source, key: signal) { [self] fd in
            if var old = savedActions.removeValue(forKey: signal) { Syscall.restoreSignal(signal, &old) }
            sigdelset(&mask, signal)
            _ = try? Syscall.signalfd(fd, &mask)
        }
    }
}
