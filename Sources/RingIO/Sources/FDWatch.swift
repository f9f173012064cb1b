#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIOBase
@_spi(Engine) import RingIOEngine

/// One fd watched for readiness through the engine: a `.pollMultishot`
/// request (a multishot `IORING_OP_POLL_ADD`), submitted again when the
/// engine ends it (a kernel before 5.13, the thread-pool backend's
/// readiness loop, or the kernel's own reasons).
///
/// `onReady` runs on the engine's thread with the ready events. A watch
/// that ended at a readiness is submitted again by `rearmIfEnded()` (read
/// and write sources call it once their handler has drained the fd, so an
/// fd that stays readable never spins on the engine's thread) or at once
/// (`rearmAtOnce`, for the fds the engine's thread drains itself: signalfd,
/// inotify, pidfd). Such a watch that the engine ends with an error is
/// submitted again 1 ms later (an error must not end the events of every
/// source fed by that fd; the delay keeps a failing poll from spinning).
///
/// The watch holds its engine weakly: an engine's hubs hold their watches,
/// and the engine holds its hubs.
final class FDWatch: Sendable {
    private struct State {
        weak var engine: IOEngine?
        var current: UInt64 = 0
        var request: IORequest?
        var armed = false
        var stopped = false
        var next: UInt64 = 1
    }

    /// A failed watch that re-arms itself waits this long first.
    static let rearmAfterError = Duration.milliseconds(1)
    let fd: Int32
    private let events: UInt32
    private let rearmAtOnce: Bool
    private let onReady: @Sendable (Int32) -> Void
    private let onError: @Sendable (Int32) -> Void
    /// `IORequest` is not `Sendable`; the requests here are only handed to
    /// the engine and compared, under the lock.
    private let state: Locked<State>

    init(engine: IOEngine, fd: Int32, events: Int16, rearmAtOnce: Bool,
         onReady: @escaping @Sendable (Int32) -> Void,
         onError: @escaping @Sendable (Int32) -> Void = { _ in }) {
        self.state = Locked(State(engine: engine))
        self.fd = fd
        self.events = UInt32(UInt16(bitPattern: events))
        self.rearmAtOnce = rearmAtOnce
        self.onReady = onReady
        self.onError = onError
    }

    /// Submits the watch if none is armed (and `stop` was not called).
    func rearmIfEnded() {
        let submit = state.withLock { s -> (IORequest, IOEngine)? in
            guard !s.stopped, !s.armed, let engine = s.engine else { return nil }
            let id = s.next
            s.next += 1
            s.current = id
            s.armed = true
            let r = IORequest(.pollMultishot(fd: fd, events: events), owner: nil,
                              shot: { [self] res in onReady(res) },
                              completion: { [self] res in ended(id, res) })
            s.request = r
            return (r, engine)
        }
        if let (request, engine) = submit { engine.submit(request) }
    }

    /// Ends the watch; `onReady` may still run once if a readiness raced.
    func stop() {
        let cancel = state.withLock { s -> (IORequest, IOEngine)? in
            s.stopped = true
            defer { s.request = nil }
            guard s.armed, let request = s.request, let engine = s.engine else { return nil }
            return (request, engine)
        }
        if let (request, engine) = cancel { engine.cancel(request) }
    }

    private func ended(_ id: UInt64, _ res: Int32) {
        let stopped = state.withLock { s -> Bool in
            if s.current == id {
                s.armed = false
                s.request = nil
            }
            return s.stopped
        }
        if res >= 0 {
            if !stopped { onReady(res) }
            if rearmAtOnce { rearmIfEnded() }
        } else if res != -ECANCELED, !stopped {
            onError(res)
            if rearmAtOnce, let engine = state.withLock({ $0.engine }) {
                _ = engine.timers.arm(deadline: .now + Self.rearmAfterError, leeway: .zero) { [weak self] in
                    self?.rearmIfEnded()
                }
            }
        }
    }
}
