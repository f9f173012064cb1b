#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import RingIOBase
import RingIOQueue

/// The engine's timers: a heap of deadlines and one timeout request in the
/// engine for the earliest of them.
///
/// ```
///  arm(d) ──▶ heap ──(earliest changed)──▶ one IORING_OP_TIMEOUT (absolute)
///                                                   │ CQE
///  fire() ◀── every entry due by now ◀── pop ◀──────┘  then re-arm for the next
/// ```
///
/// - On io_uring the timeout is a ring request, so timers cost no thread:
///   the ring thread sleeps in `io_uring_enter` until the earliest deadline
///   or other work, and runs the due `fire` closures between reaps. On the
///   thread-pool backend the same request waits on one worker.
/// - One timeout for the earliest deadline, not one per timer: with 10,000
///   armed timers a new earliest deadline costs a heap insert, a cancel and
///   a new timeout; a deadline behind the earliest costs the insert only.
///   Cancelling a timer removes it from the table of live timers at once
///   and leaves its heap slot to be skipped when it reaches the top (the
///   heap is rebuilt when over half of it is dead).
/// - Never early: the due check compares against `ContinuousClock.now`, so
///   a timeout that the kernel ends a few nanoseconds before the Swift
///   clock agrees (the two are read at slightly different moments) fires
///   nothing and re-arms.
/// - A deadline whose window (`deadline ... deadline + leeway`) holds the
///   armed timeout does not move it: the timers share the wake-up.
package final class EngineTimerService: TimerService, @unchecked Sendable {
    // @unchecked: `state` is `Locked` (its `IORequest`s are not Sendable
    // values but are only handed to the backend); `backend`, `clock` and
    // the base instants are immutable.

    private struct Entry {
        let deadline: Int64
        let fire: @Sendable () -> Void
    }

    private struct State {
        /// Deadlines by timer id (ties: arming order, which is id order).
        var heap = DeadlineHeap<Void>()
        var live: [UInt64: Entry] = [:]
        var nextID: UInt64 = 1
        /// The timeout in the engine and its deadline.
        var armed: (request: IORequest, deadline: Int64)?
        /// The engine shut down (its timeout ended with `-ECANCELED`).
        var dead = false
        /// The engine's thread polls the clock up to the earliest deadline
        /// (`spinTarget`) instead of a timeout: an `arm` for a deadline
        /// after that one arms no timeout, one before it moves the target.
        var spinning = false
        /// How late the engine's thread wakes from a timeout, lately
        /// (nanoseconds, a moving average): timeouts are armed this much
        /// before their deadline while polling is allowed.
        var wakeLatency: Int64 = 20_000
        /// When the engine's thread last woke from a timeout.
        var lastWake: Int64 = -1 << 62
        /// Timeouts end often (less than `frequentWakes` apart): timers
        /// fire one after another, so a wake-up is rarely late by its own
        /// latency alone and polling would only burn the CPU that batching
        /// the fires of one wake-up saves. Timeouts are then armed for
        /// their deadline and nothing polls.
        var frequent = false
    }

    /// With `State.spinning`: the deadline the engine's thread polls for.
    private let spinTarget = Atomic<Int64>(.max)
    /// io_uring: the ring thread's idle poll, which also says whether
    /// polling is allowed now (not while the machine is busy). nil: every
    /// timeout is armed for its deadline exactly.
    private let spin: IdleSpin?
    /// The most a timeout is armed before its deadline.
    static let maximumEarly: Int64 = 200_000
    /// Timeouts ending closer together than this are `State.frequent`.
    static let frequentWakes: Int64 = 500_000

    private let state = Locked(State())
    /// The engine's backend. It holds this service back only through the
    /// timeout in flight, which its shutdown cancels.
    private let backend: any EngineBackend
    private let clock: clockid_t
    /// `ContinuousClock` instants are measured from `base`; the kernel's
    /// clock read just after it is `baseClockNanoseconds` (never earlier).
    private let base: ContinuousClock.Instant
    private let baseClockNanoseconds: Int64

    /// - Parameter spin: io_uring: wake early and poll up to each deadline
    ///   (see `alarmEnded`); nil: the timeout is the deadline.
    init(backend: any EngineBackend, clock: clockid_t, spin: IdleSpin? = nil) {
        self.backend = backend
        self.clock = clock
        self.spin = spin
        (self.base, self.baseClockNanoseconds) = Self.calibrate(clock)
    }

    /// A `ContinuousClock` instant and the kernel clock's reading just
    /// after it, from the tightest of a few tries: a thread preempted (or
    /// a first vDSO call faulting) between the two reads would otherwise
    /// make every deadline late by that gap, for the engine's whole life.
    private static func calibrate(_ clock: clockid_t) -> (ContinuousClock.Instant, Int64) {
        func kernelNow() -> Int64 {
            var t = timespec()
            clock_gettime(clock, &t)
            return Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec)
        }
        var best: (instant: ContinuousClock.Instant, after: Int64, width: Int64)?
        for _ in 0..<16 {
            let before = kernelNow()
            let instant = ContinuousClock.now
            let after = kernelNow()
            if best == nil || after - before < best!.width { best = (instant, after, after - before) }
        }
        return (best!.instant, best!.after)
    }

    /// Nanoseconds from `base`, rounded up (a deadline is never moved earlier).
    private func nanoseconds(_ instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = (instant - base).components
        let (ns, rest) = attoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
        return seconds &* 1_000_000_000 &+ ns &+ (rest > 0 ? 1 : 0)
    }

    private var now: Int64 {
        let (seconds, attoseconds) = (ContinuousClock.now - base).components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }

    /// The number of timers armed and not yet fired or cancelled.
    package var count: Int { state.withLock { $0.live.count } }

    package func arm(deadline: ContinuousClock.Instant, leeway: Duration,
                     _ fire: @escaping @Sendable () -> Void) -> TimerToken {
        let d = nanoseconds(deadline)
        let slack = Int64(clamping: leeway.clampedNanoseconds)
        let (token, submit, cancel) = state.withLock { s -> (TimerToken, IORequest?, IORequest?) in
            let id = s.nextID
            s.nextID += 1
            s.live[id] = Entry(deadline: d, fire: fire)
            s.heap.push(when: d, sequence: id, payload: ())
            if s.spinning {
                // The engine's thread is polling the clock: it takes this
                // one too (sooner, if it is due first).
                if d < spinTarget.load(ordering: .relaxed) { spinTarget.store(d, ordering: .relaxed) }
                return (TimerToken(id: id), nil, nil)
            }
            if let armed = s.armed, armed.deadline >= d && armed.deadline - d <= slack {
                return (TimerToken(id: id), nil, nil)
            }
            if let armed = s.armed, armed.deadline <= d {
                return (TimerToken(id: id), nil, nil)
            }
            let old = s.armed?.request
            let request = makeAlarm(d, early: early(s))
            s.armed = (request, d)
            return (TimerToken(id: id), request, old)
        }
        if let submit { backend.submit(submit) }
        if let cancel { backend.submit(IORequest(.cancel(target: cancel)) { _ in }) }
        return token
    }

    @discardableResult
    package func cancel(_ token: TimerToken) -> Bool {
        state.withLock { s in
            guard s.live.removeValue(forKey: token.id) != nil else { return false }
            if s.heap.count > 64 && s.heap.count > 2 * s.live.count {
                s.heap.removeAll { s.live[$0.sequence] == nil }
            }
            return true
        }
    }

    /// How early to arm a timeout, while polling is allowed (else 0): two
    /// recent wake latencies, one for the ring thread and one for the
    /// worker it wakes then, so that both are up by the deadline. Not
    /// while timeouts end often (`State.frequent`).
    private func early(_ s: State) -> Int64 {
        guard !s.frequent, let spin, spin.allowed else { return 0 }
        return Swift.min(Swift.max(2 * s.wakeLatency, 0), Self.maximumEarly)
    }

    /// A timeout request for `deadline` (nanoseconds from `base`), armed
    /// `early` nanoseconds before it.
    private func makeAlarm(_ deadline: Int64, early: Int64) -> IORequest {
        let kernelDeadline = deadline &- early
        let storage = TimeoutStorage(nanoseconds: baseClockNanoseconds &+ kernelDeadline, deadline: kernelDeadline,
                                     sleeps: kernelDeadline > now)
        // The completion holds the service: the engine cancels the request
        // when it shuts down, which ends the cycle.
        return IORequest(.timeout(deadline: UnsafePointer(storage.pointer)), owner: storage) { [self] res in
            alarmEnded(storage, res: res)
        }
    }

    /// The engine's thread: fires what is due and arms the next timeout.
    ///
    /// A thread wakes from a timeout some tens of microseconds late (more
    /// on a virtual machine), and the handler's worker as late again. So
    /// while polling is allowed (`IdleSpin`: not on a busy machine) the
    /// timeout is armed `wakeLatency` before the deadline; the engine's
    /// thread then wakes a pool worker (which polls for its job) and polls
    /// the clock up to the deadline itself (once per wake-up: the next
    /// deadline gets a timeout, which may already be due, so that the
    /// reap ends and hands the fires over). Never early: a fire waits
    /// until `ContinuousClock.now` has reached its deadline.
    private func alarmEnded(_ storage: TimeoutStorage, res: Int32) {
        var woke = true
        while true {
            var due: [@Sendable () -> Void] = []
            var pollUntil: Int64?
            let next = state.withLock { s -> IORequest? in
                let t = now
                if woke {
                    guard let armed = s.armed, armed.request.owner === storage else { return nil }  // replaced: stale
                    s.armed = nil
                    if res == -ECANCELED {
                        // Cancelled though still the armed one: the engine shut down.
                        s.dead = true
                        return nil
                    }
                    if res == -ETIME && storage.sleeps {
                        s.wakeLatency += (Swift.min(t - storage.deadline, 2 * Self.maximumEarly) - s.wakeLatency) / 8
                    }
                    if res == -ETIME {
                        s.frequent = t - s.lastWake < Self.frequentWakes
                        s.lastWake = t
                    }
                }
                s.spinning = false
                while let top = s.heap.first {
                    if s.live[top.sequence] == nil {
                        s.heap.popFirst()
                        continue
                    }
                    if top.when > t { break }
                    s.heap.popFirst()
                    if let e = s.live.removeValue(forKey: top.sequence) { due.append(e.fire) }
                }
                guard let earliest = s.heap.first?.when else { return nil }
                let early = early(s)
                if woke && early > 0 && earliest - t <= early {
                    s.spinning = true
                    spinTarget.store(earliest, ordering: .relaxed)
                    pollUntil = earliest
                    return nil
                }
                let request = makeAlarm(earliest, early: early)
                s.armed = (request, earliest)
                return request
            }
            if let next { backend.submit(next) }
            for fire in due { fire() }
            guard pollUntil != nil, let spin else { return }
            if woke { WorkerPool.shared.prewake() }
            woke = false
            // Up to the spin budget; then (or when preempted) the loop
            // looks again, and arms a timeout for what is not yet due.
            _ = spin.poll { now >= spinTarget.load(ordering: .relaxed) }
        }
    }
}

/// The `__kernel_timespec` a timeout request points at, alive until its
/// completion (the request's owner).
private final class TimeoutStorage: Sendable {
    // `Sendable`: the pointer is written once, here, before the request is
    // submitted; afterwards only the kernel reads it.
    nonisolated(unsafe) let pointer: UnsafeMutablePointer<__kernel_timespec>
    /// The timeout's moment in the service's nanoseconds (for its wake latency).
    let deadline: Int64
    /// The moment was ahead when the timeout was made: its end is a
    /// wake-up whose latency the service learns (not an overdue timer's).
    let sleeps: Bool

    init(nanoseconds: Int64, deadline: Int64, sleeps: Bool) {
        self.deadline = deadline
        self.sleeps = sleeps
        pointer = .allocate(capacity: 1)
        let ns = max(0, nanoseconds)
        pointer.initialize(to: __kernel_timespec(tv_sec: ns / 1_000_000_000, tv_nsec: ns % 1_000_000_000))
    }

    deinit { pointer.deallocate() }
}
