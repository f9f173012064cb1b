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
        /// The first fire of the schedule; nil when not scheduled, or a
        /// one-shot has fired. (A repeating timer's later fires are the
        /// engine's: it re-arms it every `interval`.)
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
    ///     Intervals under 1 µs are taken as 1 µs; a fraction of a
    ///     nanosecond is rounded up to a whole one.
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

    /// Arms the engine's timer for the fires of `generation`.
    private func armNext(_ generation: UInt64) {
        guard let (next, interval) = timer.withLock({ t -> (ContinuousClock.Instant, Duration?)? in
            guard t.generation == generation, t.active, let next = t.next else { return nil }
            return (next, t.interval)
        }) else { return }
        // A strong reference: the engine lets go of it when the timer ends
        // or is cancelled (`unregister`), and an active source keeps itself
        // alive until then anyway. (A weak one gave every source a side
        // table: each retain and release of it, in the timer service and
        // in the queue, took the slow path; the most of the timer thread's
        // time with 10,000 timers.) A repeating timer is one arm: the
        // engine re-arms it every interval (no arm, no lock of this
        // source's schedule but the generation check, per fire).
        let token = engine.timers.arm(deadline: next, repeating: interval, target: self, argument: generation)
        let stale = timer.withLock { t -> Bool in
            guard t.generation == generation, t.active else { return true }
            t.token = token
            return false
        }
        if stale { engine.timers.cancel(token) }
    }

    /// A pool worker: the engine's timer of `generation` fired, `fires`
    /// times (every fire n due by now, at deadline + n × interval: no
    /// drift). Returns whether the engine keeps repeating it.
    package func timerFired(_ generation: UInt64, fires: UInt) -> Bool {
        guard let (count, repeats) = timer.withLock({ t -> (UInt, Bool)? in
            guard t.generation == generation, t.active, t.next != nil else { return nil }
            guard t.interval != nil else {
                t.token = nil
                t.next = nil  // a one-shot stays quiet until scheduled again
                return (1, false)
            }
            return (fires, true)
        }) else { return false }
        mergeEvent(count)
        return repeats
    }
}
