import Synchronization
import SystemPackage
import RingIOBase
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// A timer: fires once at a deadline, or at a deadline and then every
/// interval; ``IOSource/data`` is the number of fires since the last
/// delivery.
///
/// Fire *n* is due at `deadline + n × interval`, whatever the lateness of
/// earlier ones (no drift); a late delivery carries every fire it covers in
/// `data`. A fire is never earlier than due. The timer arms the engine's
/// timers: no thread per timer; an idle worker of the library's pool
/// sleeps until the earliest deadline and then runs the handler itself,
/// one thread wake-up per fire. While the machine is not busy it wakes a
/// few tens of microseconds early and polls the clock up to the deadline,
/// so that the wake-up does not make the handler late.
///
/// ```swift
/// let timer = IOTimerSource(queue: IOQueue(label: "tick"))
/// timer.schedule(deadline: .now + .milliseconds(10), repeating: .milliseconds(10))
/// timer.setEventHandler { print("fires: \(timer.data)") }
/// timer.activate()
/// ```
///
/// The corresponding libdispatch type is `DISPATCH_SOURCE_TYPE_TIMER`.
public final class IOTimerSource: IOSource, TimerTarget, @unchecked Sendable {
    // @unchecked: `schedule` is `Locked`; `engine` is immutable.

    private struct Schedule {
        /// Registered (activated and not cancelled).
        var active = false
        /// The next fire; nil when not scheduled, or a one-shot has fired.
        var next: ContinuousClock.Instant?
        var interval: Duration?
        var leeway = Duration.zero
        /// Changed by every `schedule` and by `unregister`: a fire of an
        /// older arming is ignored.
        var generation: UInt64 = 0
        var token: TimerToken?
    }

    private let engine: IOEngine
    private let timer = Locked(Schedule())
    private let generations = Atomic<UInt64>(0)

    /// Creates an inactive timer, not yet scheduled (it never fires until
    /// ``schedule(deadline:repeating:leeway:)`` is called).
    ///
    /// - Parameters:
    ///   - queue: where the handlers run.
    ///   - engine: whose timers it arms.
    public init(queue: IOQueue, engine: IOEngine = .shared) {
        self.engine = engine
        super.init(queue: queue, merge: .add)
    }

    /// Sets (or replaces) the schedule: the first fire at `deadline`, then,
    /// with an `interval`, every `interval` after it. Fires due under an
    /// earlier schedule and not yet delivered are dropped. May be called at
    /// any time, from any thread, also from the timer's own handler.
    ///
    /// - Parameters:
    ///   - deadline: the first fire. A deadline in the past fires at once.
    ///   - interval: the period of a repeating timer; nil for one fire.
    ///     Intervals under 1 µs are taken as 1 µs.
    ///   - leeway: how late a fire may be to share a wake-up with other
    ///     timers; fires are never early.
    ///
    /// The corresponding libdispatch function is `dispatch_source_set_timer`.
    public func schedule(deadline: ContinuousClock.Instant, repeating interval: Duration? = nil,
                         leeway: Duration = .zero) {
        let interval = interval.map { Swift.max($0, .microseconds(1)) }
        let generation = generations.add(1, ordering: .relaxed).newValue
        let (old, arm) = timer.withLock { t -> (TimerToken?, Bool) in
            let old = t.token
            t.token = nil
            t.next = deadline
            t.interval = interval
            t.leeway = leeway
            t.generation = generation
            return (old, t.active)
        }
        if let old { engine.timers.cancel(old) }
        dropPending()
        if arm { armNext(generation) }
    }

    override func register() -> Errno? {
        let generation = timer.withLock { t -> UInt64? in
            t.active = true
            return t.next != nil ? t.generation : nil
        }
        if let generation { armNext(generation) }
        return nil
    }

    override func unregister() {
        let generation = generations.add(1, ordering: .relaxed).newValue
        let token = timer.withLock { t -> TimerToken? in
            defer { t.token = nil }
            t.active = false
            t.generation = generation
            return t.token
        }
        if let token { engine.timers.cancel(token) }
    }

    /// Arms the engine's timer for the next fire of `generation`.
    private func armNext(_ generation: UInt64) {
        guard let next = timer.withLock({ t -> ContinuousClock.Instant? in
            guard t.generation == generation, t.active, let next = t.next else { return nil }
            return next
        }) else { return }
        // A strong reference: the engine lets go of it when the timer fires
        // or is cancelled (`unregister`), and an active source keeps itself
        // alive until then anyway. (A weak one gave every source a side
        // table: each retain and release of it, in the timer service and
        // in the queue, took the slow path; the most of the timer thread's
        // time with 10,000 timers.)
        let token = engine.timers.arm(deadline: next, target: self, argument: generation)
        let stale = timer.withLock { t -> Bool in
            guard t.generation == generation, t.active else { return true }
            t.token = token
            return false
        }
        if stale { engine.timers.cancel(token) }
    }

    /// A pool worker: counts the fires due by now and arms the next.
    package func timerFired(_ generation: UInt64) {
        let now = ContinuousClock.now
        let fires = timer.withLock { t -> UInt? in
            guard t.generation == generation, t.active, let next = t.next else { return nil }
            t.token = nil
            guard let interval = t.interval else {
                t.next = nil  // a one-shot stays quiet until scheduled again
                return 1
            }
            // Fire n is due at deadline + n × interval: count every one due
            // by now, and move on to the first still ahead.
            // (The common case, on time, with no 128-bit multiplication.)
            let period = Swift.max(interval.clampedNanoseconds, 1)
            let extra = now > next ? UInt((now - next).clampedNanoseconds / period) : 0
            t.next = extra == 0 ? next + interval : next + interval * Int(extra + 1)
            return extra + 1
        }
        guard let fires else { return }
        mergeEvent(fires)
        armNext(generation)
    }
}
