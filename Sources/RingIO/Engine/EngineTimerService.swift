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

    private struct Entry {
        let deadline: Int64
        let fire: @Sendable () -> Void
    }

    private struct State {
        /// Deadlines by timer id (ties: arming order, which is id order).
        var heap = DeadlineHeap<Void>()
        var live: [UInt64: Entry] = [:]
        var nextID: UInt64 = 1
        /// The deadline the pool's alarm is scheduled for.
        var scheduled: Int64?
    }

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
    package var count: Int { state.withLock { $0.live.count } }

    package func arm(deadline: ContinuousClock.Instant, leeway: Duration,
                     _ fire: @escaping @Sendable () -> Void) -> TimerToken {
        let d = nanoseconds(deadline)
        return state.withLock { s -> TimerToken in
            let id = s.nextID
            s.nextID += 1
            s.live[id] = Entry(deadline: d, fire: fire)
            s.heap.push(when: d, sequence: id, payload: ())
            if s.scheduled.map({ d < $0 }) ?? true { schedule(d, &s) }
            return TimerToken(id: id)
        }
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

    /// Under the lock (the pool's lock nests inside it, so that two
    /// schedules cannot land out of order): the alarm at `deadline`.
    private func schedule(_ deadline: Int64, _ s: inout State) {
        s.scheduled = deadline
        let monotonic = baseMonotonic &+ deadline
        pool.schedule(alarm, atNanoseconds: UInt64(Swift.max(monotonic, 0)))
    }

    /// A pool worker: fires what is due and schedules the alarm for the next.
    private func alarmEnded() {
        var due: [@Sendable () -> Void] = []
        state.withLock { s in
            let t = now
            s.scheduled = nil
            while let top = s.heap.first {
                if s.live[top.sequence] == nil {
                    s.heap.popFirst()
                    continue
                }
                if top.when > t { break }
                s.heap.popFirst()
                if let e = s.live.removeValue(forKey: top.sequence) { due.append(e.fire) }
            }
            if let earliest = s.heap.first?.when { schedule(earliest, &s) }
        }
        for fire in due { fire() }
    }
}
