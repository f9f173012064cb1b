#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import RingIOBase
import RingIOQueue

/// The engine's timers: a heap of deadlines and one `PoolAlarm` for the
/// earliest of them.
///
/// ```
///  arm(d) ──▶ heap ──(earliest changed)──▶ the pool's alarm (an idle worker sleeps until it)
///                                                   │ wakes
///  fire() ◀── every entry due by now ◀── pop ◀──────┘  then re-schedules for the next
/// ```
///
/// - No thread per timer and no thread of its own: an idle pool worker
///   sleeps until the earliest deadline, fires what is due and then runs
///   the handlers those enqueue itself, so a fire costs one thread wake-up.
///   (It was a ring timeout: the ring thread woke, then the worker it
///   handed the handler to, two wake-ups per fire, each waiting for a CPU
///   on a busy machine.) The same on both backends.
/// - One alarm for the earliest deadline, not one per timer: with 10,000
///   armed timers a deadline behind the earliest costs a heap insert only.
///   Cancelling a timer removes it from the table of live timers at once
///   and leaves its heap slot to be skipped when it reaches the top (the
///   heap is rebuilt when over half of it is dead).
/// - Never early: the due check compares against `ContinuousClock.now`, so
///   an alarm that ends a few nanoseconds before the Swift clock agrees
///   fires nothing and is scheduled again.
/// - `leeway` is accepted and not used: a fire is as early as it may be.
package final class EngineTimerService: TimerService, @unchecked Sendable {
    // @unchecked: `state` is `Locked`; the rest is immutable (`alarm` is
    // set once, in `init`).

    /// What a fire calls: a closure, or a target's `timerFired` with an
    /// argument (a timer source allocates nothing per fire).
    /// A target's timer repeats every `period` nanoseconds (0: once).
    private enum Fire {
        case closure(@Sendable () -> Void)
        case target(any TimerTarget, UInt64, period: Int64)
    }

    private struct State {
        /// The armed timers (see `TimerTable`). A closure's fire frees its
        /// slot when it is popped; a target's keeps it until `alarmEnded`
        /// knows whether it repeats.
        var table = TimerTable<Fire>()
        /// The deadline the pool's alarm is scheduled for.
        var scheduled: Int64?
        /// A worker runs fires now (`alarmEnded`): the alarm stays
        /// unscheduled until it is done, which schedules it for the
        /// earliest deadline then.
        var firing = false
        /// The due fires' buffer, between fires (kept with its capacity).
        var spare: [Due] = []
    }

    /// A due timer: its token, its fires due by now (a repeating one's
    /// count), and what it calls.
    private typealias Due = (id: UInt64, fires: Int64, fire: Fire)

    private let state = Locked(State())
    private let pool = WorkerPool.shared
    private var alarm: PoolAlarm!
    /// `ContinuousClock` instants are measured from `base`; CLOCK_MONOTONIC
    /// read just after it is `baseMonotonic` (never earlier).
    private let base: ContinuousClock.Instant
    private let baseMonotonic: Int64

    init() {
        (self.base, self.baseMonotonic) = Self.calibrate()
        alarm = PoolAlarm { [weak self] in self?.alarmEnded() }
    }

    deinit { pool.unschedule(alarm) }

    /// A `ContinuousClock` instant and CLOCK_MONOTONIC's reading just
    /// after it, from the tightest of a few tries: a thread preempted (or
    /// a first vDSO call faulting) between the two reads would otherwise
    /// make every deadline late by that gap, for the engine's whole life.
    private static func calibrate() -> (ContinuousClock.Instant, Int64) {
        var best: (instant: ContinuousClock.Instant, after: Int64, width: Int64)?
        for _ in 0..<16 {
            let before = Int64(monotonicNanoseconds())
            let instant = ContinuousClock.now
            let after = Int64(monotonicNanoseconds())
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
    package var count: Int { state.withLock { $0.table.liveCount } }

    package func arm(deadline: ContinuousClock.Instant, leeway: Duration,
                     _ fire: @escaping @Sendable () -> Void) -> TimerToken {
        arm(nanoseconds(deadline), .closure(fire))
    }

    /// Arms a timer that calls `target.timerFired(argument, fires:)`, as
    /// `arm(deadline:leeway:_:)` calls its closure; with an `interval`, again
    /// at `deadline + n × interval` (the interval rounded up to a whole
    /// nanosecond) until `timerFired` returns false or the token is
    /// cancelled. The repeats keep the token, cost no arm, and are counted
    /// in 64-bit nanoseconds (a late fire covers every repeat due by then).
    package func arm(deadline: ContinuousClock.Instant, repeating interval: Duration?, target: any TimerTarget,
                     argument: UInt64) -> TimerToken {
        var period: Int64 = 0
        if let interval {
            let (seconds, attoseconds) = interval.components
            let whole = seconds >= 9_000_000_000 ? Int64.max / 2
                : seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000 &+ (attoseconds % 1_000_000_000 > 0 ? 1 : 0)
            period = Swift.max(whole, 1)
        }
        return arm(nanoseconds(deadline), .target(target, argument, period: period))
    }

    private func arm(_ d: Int64, _ fire: Fire) -> TimerToken {
        state.withLock { s -> TimerToken in
            let id = s.table.arm(fire, at: d)
            if !s.firing, s.scheduled.map({ d < $0 }) ?? true { schedule(d, &s) }
            return TimerToken(id: id)
        }
    }

    @discardableResult
    package func cancel(_ token: TimerToken) -> Bool {
        state.withLock { $0.table.cancel(token.id) }
    }

    /// Under the lock (the pool's lock nests inside it, so that two
    /// schedules cannot land out of order): the alarm at `deadline`.
    private func schedule(_ deadline: Int64, _ s: inout State) {
        s.scheduled = deadline
        let monotonic = baseMonotonic &+ deadline
        pool.schedule(alarm, atNanoseconds: UInt64(Swift.max(monotonic, 0)))
    }

    /// A pool worker: fires what is due, then schedules the alarm for the
    /// next deadline.
    ///
    /// One worker fires at a time: the alarm is scheduled again only when
    /// the fires have run (timers armed meanwhile join the heap and are
    /// scheduled then). Scheduling it before the fires, as a first version
    /// did, let the next deadline's fires start on a second worker while
    /// the first still ran its own, and with many channel intervals every
    /// worker ran interval ticks at once. Under ThreadSanitizer that hung
    /// `LoadTests`: there the Swift runtime's `once` never takes its fast
    /// path and every generic metadata lookup (`InlineQueue<Slot>` in each
    /// tick's invariant check) takes a process-wide priority-inheritance
    /// futex, which hands the lock to the next waiter in turn; with a
    /// dozen threads ticking, each lookup cost a context switch, the
    /// workers looked blocked, the watchdog added workers (64), and each
    /// one made the convoy longer. The ticks ran on the one ring thread
    /// before the alarms, and now run on one worker at a time again.
    ///
    /// (A second call while one fires, which an `arm` racing the alarm's
    /// end can schedule, fires nothing: the first schedules the alarm for
    /// what is due when it is done.)
    func alarmEnded() {
        var t: Int64 = 0
        guard var due = state.withLock({ s -> [Due]? in
            guard !s.firing else { return nil }
            t = now
            s.scheduled = nil
            s.firing = true
            var due = s.spare
            s.spare = []
            while let top = s.table.firstDue(by: t), let fire = s.table.fire(of: top.id) {
                switch fire {
                case .closure:
                    s.table.removeFirst()
                    s.table.take(top.id)
                    due.append((top.id, 1, fire))
                case .target(_, _, let period) where period > 0:
                    // Repeat n is due at when + n × period: every one due
                    // by `t` is this fire's; the next, the first still
                    // ahead, is where its entry moves now (one sift; a
                    // `timerFired` that returns false takes it after).
                    let fires = t > top.when ? (t - top.when) / period + 1 : 1
                    let (product, over) = fires.multipliedReportingOverflow(by: period)
                    let (next, overNext) = top.when.addingReportingOverflow(product)
                    s.table.moveFirst(to: over || overNext ? Int64.max : next)
                    due.append((top.id, fires, fire))
                case .target:
                    // A one-shot keeps its slot (and token) until it has fired.
                    s.table.removeFirst()
                    due.append((top.id, 1, fire))
                }
            }
            return due
        }) else { return }
        var done: [UInt64] = []
        for (id, fires, fire) in due {
            switch fire {
            case .closure(let body):
                body()
            case .target(let target, let argument, let period):
                if !target.timerFired(argument, fires: UInt(fires)) || period == 0 { done.append(id) }
            }
        }
        // The buffer goes back for the next fire (one worker fires at a
        // time: no allocation per fire once it has grown).
        due.removeAll(keepingCapacity: true)
        state.withLock { s in
            for id in done { s.table.take(id) }
            s.spare = due
            s.firing = false
            // Cancelled entries on top are dropped, so that the alarm is
            // for a live timer.
            if let earliest = s.table.first()?.when { schedule(earliest, &s) }
        }
    }
}

/// What a timer of the engine can call instead of a closure (see
/// `EngineTimerService.arm(deadline:repeating:target:argument:)`).
package protocol TimerTarget: AnyObject, Sendable {
    /// The timer armed with `argument` fired (on a pool worker), `fires`
    /// times (a repeating timer's fires due by now). Returns whether a
    /// repeating timer goes on (false: its token names nothing after).
    func timerFired(_ argument: UInt64, fires: UInt) -> Bool
}
