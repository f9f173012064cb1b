#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine

/// An engine's signal sources: one signalfd for every watched signal, read
/// by the engine's thread when the ring (or the readiness loop) reports it
/// readable.
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
    // @unchecked: every field is touched only with `lock` held.
    private let lock = PlainLock()
    private unowned(unsafe) let engine: IOEngine
    // `unowned(unsafe)`: the engine holds the hub (an attachment) for its
    // whole life; the hub is used only by sources, which hold the engine.
    private var fd: Int32 = -1
    private var mask = sigset_t()
    private var sources: [Int32: [ObjectIdentifier: Weak]] = [:]
    private var savedActions: [Int32: sigaction] = [:]
    private var watch: FDWatch?

    private struct Weak { weak var source: IOSignalSource? }

    init(engine: IOEngine) {
        self.engine = engine
        sigemptyset(&mask)
    }

    static func of(_ engine: IOEngine) -> SignalHub {
        engine.attachment(SignalHub.self) { SignalHub(engine: engine) }
    }

    /// Starts counting `signal` for `source`.
    func add(_ source: IOSignalSource, signal: Int32) -> Errno? {
        guard signal > 0, signal < 65, signal != SIGKILL, signal != SIGSTOP else { return .invalidArgument }
        Syscall.blockSignalOnThisThread(signal)
        let startWatch = lock.withLock { () -> Result<FDWatch?, Errno> in
            var newMask = mask
            sigaddset(&newMask, signal)
            do throws(Errno) {
                let newFD = try Syscall.signalfd(fd, &newMask)
                mask = newMask
                var started: FDWatch?
                if fd < 0 {
                    fd = newFD
                    let w = FDWatch(engine: engine, fd: newFD, events: Int16(POLLIN), rearmAtOnce: true,
                                    onReady: { [weak self] _ in self?.drain() })
                    watch = w
                    started = w
                }
                sources[signal, default: [:]][ObjectIdentifier(source)] = Weak(source: source)
                return .success(started)
            } catch {
                return .failure(error)
            }
        }
        let w: FDWatch?
        switch startWatch {
        case .failure(let error): return error
        case .success(let started): w = started
        }
        w?.rearmIfEnded()
        // The thread that reads the signalfd: the ring thread, or the
        // readiness loop (which the watch above starts).
        var tid = engine.watchThreadID
        var waited = 0
        while tid == 0 && waited < 2000 {
            usleep(500)
            waited += 1
            tid = engine.watchThreadID
        }
        guard tid != 0 else {
            remove(source, signal: signal)
            return .resourceTemporarilyUnavailable
        }
        return lock.withLock { () -> Errno? in
            if savedActions[signal] != nil { return nil }
            var old = sigaction()
            do throws(Errno) {
                try Syscall.forwardSignal(signal, to: tid, saving: &old)
                savedActions[signal] = old
                return nil
            } catch {
                return error
            }
        }
    }

    /// Stops counting `signal` for `source`; the last source of a signal
    /// gives the signal its old action back.
    func remove(_ source: IOSignalSource, signal: Int32) {
        let stop = lock.withLock { () -> FDWatch? in
            sources[signal]?[ObjectIdentifier(source)] = nil
            guard sources[signal]?.isEmpty ?? true else { return nil }
            sources[signal] = nil
            if var old = savedActions.removeValue(forKey: signal) { Syscall.restoreSignal(signal, &old) }
            sigdelset(&mask, signal)
            if fd >= 0 { _ = try? Syscall.signalfd(fd, &mask) }
            guard sources.isEmpty, let w = watch else { return nil }
            // No signal left: the watch and the fd go (a later source makes new ones).
            watch = nil
            let old = fd
            fd = -1
            w.stop()
            // The ring holds its own reference to the file until the
            // watch's cancel completes; the number may be reused at once.
            Syscall.closeIgnoringErrors(old)
            return w
        }
        _ = stop
    }

    /// The engine's thread: reads every pending signal and tells each
    /// source of that signal how many arrived.
    private func drain() {
        var counts: [Int32: UInt] = [:]
        let fd = lock.withLock { self.fd }
        guard fd >= 0 else { return }
        var records = [signalfd_siginfo](repeating: signalfd_siginfo(), count: 16)
        while true {
            // Non-blocking: EAGAIN once every pending signal is read.
            guard let n = try? records.withUnsafeMutableBytes({ buffer throws(Errno) in try Syscall.read(fd, into: buffer) }),
                  n > 0 else { break }
            for i in 0..<(n / MemoryLayout<signalfd_siginfo>.stride) {
                counts[Int32(records[i].ssi_signo), default: 0] += 1
            }
            if n < records.count * MemoryLayout<signalfd_siginfo>.stride { break }
        }
        let targets = lock.withLock {
            counts.map { (sig, count) in (count, sources[sig]?.values.compactMap { $0.source } ?? []) }
        }
        for (count, list) in targets {
            for source in list { source.mergeEvent(count) }
        }
    }
}
