import Synchronization
import SystemPackage
import RingIOBase
import RingIOQueue

/// A source of events, delivered to a handler on a queue: the base of the
/// timer, read, write, file-system, signal, process and user-data sources.
///
/// A source is created inactive. Set its handlers, then call ``activate()``
/// (or ``resume()`` once). Events that arrive while the event handler runs,
/// or while the source is suspended, merge into one delivery: ``data`` tells
/// what the delivery merged (a count, a set of flags or an estimate: see each
/// kind). ``cancel()`` stops deliveries; the cancel handler then runs once,
/// on the queue.
///
/// ```
///  kernel/engine ──▶ merge(data) ──▶ pending ──(active, not suspended,
///                                               no handler running)──▶ queue: handler
/// ```
///
/// Users do not subclass it; the kinds are its subclasses. An active source
/// stays alive until it is cancelled, whether or not the program keeps a
/// reference to it.
///
/// The corresponding libdispatch type is `dispatch_source_t`.
public class IOSource: @unchecked Sendable {
    // @unchecked: every mutable field is in `state` (a Locked) or is an
    // Atomic; `queue` and `mergeKind` are immutable.

    /// How events merge into the pending `data`.
    enum MergeKind {
        case add, or, replace
        /// Read sources: the pending value only says "ready"; the delivery
        /// computes `data` (and may deliver 0, at end of file).
        case level
    }

    enum Phase { case inactive, active, cancelled }

    struct State {
        var phase = Phase.inactive
        var suspendCount = 0
        var pending: UInt = 0
        var hasPending = false
        /// A delivery (or the registration handler) is scheduled on the queue or running.
        var delivering = false
        /// The registration handler has run: deliveries may start.
        var registered = false
        var cancelScheduled = false
        var eventHandler: (@Sendable () -> Void)?
        var cancelHandler: (@Sendable () -> Void)?
        var registrationHandler: (@Sendable () -> Void)?
        /// `events()` was called: deliveries go to `waiter`.
        var eventsMode = false
        var waiter: CheckedContinuation<UInt?, Never>?
        /// The `events()` consumer holds an element and has not asked for
        /// the next: the source holds events back, as while a handler runs.
        var consumerBusy = false
        /// Keeps an active source alive until its cancel handler has run.
        var keepAlive: IOSource?
    }

    let queue: IOQueue
    let mergeKind: MergeKind
    let state = Locked(State())
    private let delivered = Atomic<UInt>(0)
    private let registrationErrorCode = Atomic<Int32>(0)

    init(queue: IOQueue, merge: MergeKind) {
        self.queue = queue
        self.mergeKind = merge
    }

    // MARK: - handlers

    /// Sets the handler that runs, on the source's queue, for each delivery.
    /// Calls for one source never overlap, even on a concurrent queue.
    ///
    /// - Parameter handler: the handler, or nil to remove it (events then
    ///   stay pending until one is set).
    ///
    /// The corresponding libdispatch function is `dispatch_source_set_event_handler`.
    public final func setEventHandler(_ handler: (@Sendable () -> Void)?) {
        let start = state.withLock { s -> Bool in
            s.eventHandler = handler
            return scheduleLocked(&s)
        }
        if start { queue.async { self.deliver() } }
    }

    /// Sets the handler that runs once, on the queue, after ``cancel()``
    /// (and after any event handler call in progress has returned). For a
    /// source on a file descriptor, close the descriptor there, not before.
    ///
    /// The corresponding libdispatch function is `dispatch_source_set_cancel_handler`.
    public final func setCancelHandler(_ handler: (@Sendable () -> Void)?) {
        state.withLock { $0.cancelHandler = handler }
    }

    /// Sets the handler that runs once, on the queue, after activation and
    /// before any event handler call. When it runs the source is watching:
    /// an event that happens after that is delivered.
    ///
    /// The corresponding libdispatch function is `dispatch_source_set_registration_handler`.
    public final func setRegistrationHandler(_ handler: (@Sendable () -> Void)?) {
        state.withLock { $0.registrationHandler = handler }
    }

    // MARK: - life cycle

    /// Starts the source: it registers with the engine (arms its timer,
    /// watches its fd, ...) and runs the registration handler on its queue.
    /// A second call does nothing.
    ///
    /// When the source cannot be registered (a watch limit, a closed fd), it
    /// is cancelled instead: no event handler runs, the cancel handler does,
    /// and ``registrationError`` says why.
    ///
    /// The corresponding libdispatch function is `dispatch_activate`.
    public final func activate() {
        let go = state.withLock { s -> Bool in
            guard s.phase == .inactive else { return false }
            s.phase = .active
            s.keepAlive = self
            s.delivering = true  // the registration step below
            return true
        }
        guard go else { return }
        if let error = register() {
            registrationErrorCode.store(error.rawValue, ordering: .releasing)
            state.withLock { $0.delivering = false }
            cancel()
            return
        }
        queue.async {
            let handler = self.state.withLock { s -> (@Sendable () -> Void)? in
                defer { s.registrationHandler = nil }
                return s.phase == .cancelled ? nil : s.registrationHandler
            }
            handler?()
            self.finishDelivery(afterEvent: false)
        }
    }

    /// Holds deliveries back; events still arrive and merge. Counted: the
    /// source delivers again after as many ``resume()`` calls.
    ///
    /// The corresponding libdispatch function is `dispatch_suspend`.
    public final func suspend() {
        state.withLock { $0.suspendCount += 1 }
    }

    /// Undoes one ``suspend()``; on an inactive source that is not
    /// suspended, activates it (as libdispatch's `dispatch_resume` does).
    ///
    /// - Precondition: the source is suspended, or inactive (more resumes
    ///   than suspends is a programmer error, as in libdispatch).
    ///
    /// The corresponding libdispatch function is `dispatch_resume`.
    public final func resume() {
        enum Step { case activate, deliver, nothing }
        let step = state.withLock { s -> Step in
            if s.suspendCount == 0 && s.phase == .inactive { return .activate }
            precondition(s.suspendCount > 0, "IOSource.resume() without a matching suspend()")
            s.suspendCount -= 1
            return scheduleLocked(&s) ? .deliver : .nothing
        }
        switch step {
        case .activate: activate()
        case .deliver: queue.async { self.deliver() }
        case .nothing: break
        }
    }

    /// Stops the source: no event handler call starts after this; one in
    /// progress finishes; then the cancel handler runs once, on the queue
    /// (never inside this call). Cancelling an inactive source runs its
    /// cancel handler too, without activating it. A second call does nothing.
    ///
    /// The corresponding libdispatch function is `dispatch_source_cancel`.
    public final func cancel() {
        let (wasActive, runNow, waiter) = state.withLock { s -> (Bool, Bool, CheckedContinuation<UInt?, Never>?) in
            guard s.phase != .cancelled else { return (false, false, nil) }
            let wasActive = s.phase == .active
            s.phase = .cancelled
            s.keepAlive = s.keepAlive ?? self
            let waiter = s.waiter
            s.waiter = nil
            if !s.delivering && !s.cancelScheduled {
                s.cancelScheduled = true
                return (wasActive, true, waiter)
            }
            return (wasActive, false, waiter)
        }
        waiter?.resume(returning: nil)
        if wasActive { unregister() }
        if runNow { queue.async { self.runCancelHandler() } }
    }

    /// Whether ``cancel()`` was called.
    ///
    /// The corresponding libdispatch function is `dispatch_source_testcancel`.
    public final var isCancelled: Bool { state.withLock { $0.phase == .cancelled } }

    /// Inside the event handler: what this delivery merged (see each kind).
    /// Elsewhere: the data of the latest delivery.
    ///
    /// The corresponding libdispatch function is `dispatch_source_get_data`.
    public final var data: UInt { delivered.load(ordering: .acquiring) }

    /// Why the source could not be registered at ``activate()`` (it was
    /// cancelled instead); nil when it was, or before activation. For
    /// example `ENOSPC` when the inotify watch limit
    /// (`/proc/sys/fs/inotify/max_user_watches`) is reached, `EMFILE` when
    /// no fd is left for an inotify or signal fd, `EBADF` for a closed fd.
    public final var registrationError: Errno? {
        let code = registrationErrorCode.load(ordering: .acquiring)
        return code == 0 ? nil : Errno(rawValue: code)
    }

    // MARK: - what the kinds provide

    /// Registers with the engine; an error cancels the source. Called once,
    /// by `activate`, outside the lock.
    func register() -> Errno? { nil }

    /// Unregisters (cancels watches, disarms timers). Called once, by
    /// `cancel`, when the source was active.
    func unregister() {}

    /// On the queue, before the handler: the data of a delivery from the
    /// merged pending value; nil skips the delivery.
    func prepareDelivery(_ merged: UInt) -> UInt? { merged == 0 ? nil : merged }

    /// On the queue, after the handler returned (or, for `events()`, when
    /// the consumer asks for the next element): level-triggered kinds look
    /// again and merge when still ready.
    func afterDelivery() {}

    // MARK: - merging and delivery

    /// Merges `value` into the pending data (any thread) and schedules a
    /// delivery when one may start.
    final func mergeEvent(_ value: UInt) {
        let start = state.withLock { s -> Bool in
            guard s.phase != .cancelled else { return false }
            switch mergeKind {
            case .add: s.pending = s.pending &+ value
            case .or: s.pending |= value
            case .replace, .level: s.pending = value
            }
            s.hasPending = true
            return scheduleLocked(&s)
        }
        if start { queue.async { self.deliver() } }
    }

    /// Drops what is pending (a timer's new schedule).
    final func dropPending() {
        state.withLock { s in
            s.pending = 0
            s.hasPending = false
        }
    }

    /// Under the lock: whether a delivery should be scheduled now; marks it.
    final func scheduleLocked(_ s: inout State) -> Bool {
        guard s.phase == .active, s.registered, !s.delivering, s.suspendCount == 0, s.hasPending else { return false }
        if s.eventsMode {
            guard s.waiter != nil, !s.consumerBusy else { return false }
        } else {
            guard s.eventHandler != nil else { return false }
        }
        s.delivering = true
        return true
    }

    /// On the queue: one delivery.
    final func deliver() {
        enum Target { case handler(@Sendable () -> Void), waiter, none }
        let (merged, target) = state.withLock { s -> (UInt, Target) in
            guard s.phase == .active else { return (0, .none) }
            let target: Target
            if s.eventsMode {
                target = s.waiter != nil ? .waiter : .none
            } else {
                target = s.eventHandler.map { .handler($0) } ?? .none
            }
            if case .none = target { return (0, .none) }
            let merged = s.pending
            s.pending = 0
            s.hasPending = false
            return (merged, target)
        }
        if case .none = target {
            finishDelivery(afterEvent: false)
            return
        }
        guard let value = prepareDelivery(merged) else {
            finishDelivery(afterEvent: true)
            return
        }
        delivered.store(value, ordering: .releasing)
        switch target {
        case .handler(let handler):
            handler()
            finishDelivery(afterEvent: true)
        case .waiter:
            let waiter = state.withLock { s -> CheckedContinuation<UInt?, Never>? in
                defer { s.waiter = nil }
                if s.waiter != nil { s.consumerBusy = true }
                return s.waiter
            }
            finishDelivery(afterEvent: false)
            waiter?.resume(returning: value)
        case .none:
            finishDelivery(afterEvent: false)
        }
    }

    /// On the queue, at the end of a delivery (or of the registration step).
    final func finishDelivery(afterEvent: Bool) {
        if afterEvent { afterDelivery() }
        let (again, cancelNow) = state.withLock { s -> (Bool, Bool) in
            s.delivering = false
            if s.phase == .active { s.registered = true }
            if s.phase == .cancelled && !s.cancelScheduled {
                s.cancelScheduled = true
                return (false, true)
            }
            return (scheduleLocked(&s), false)
        }
        if cancelNow { runCancelHandler(); return }
        if again { queue.async { self.deliver() } }
    }

    /// On the queue: the cancel handler, once; then the source lets go of
    /// its handlers (and of itself).
    private func runCancelHandler() {
        let (handler, keepAlive) = state.withLock { s -> ((@Sendable () -> Void)?, IOSource?) in
            let h = s.cancelHandler
            s.cancelHandler = nil
            s.eventHandler = nil
            s.registrationHandler = nil
            defer { s.keepAlive = nil }
            return (h, s.keepAlive)
        }
        handler?()
        withExtendedLifetime(keepAlive) {}
    }
}
