import Synchronization

/// Whether an idle thread may poll for new work before it sleeps, and the
/// polling itself.
///
/// Polling saves the 5–50 µs of a futex or eventfd wake-up, but only while
/// the poller keeps its CPU. On a busy machine the scheduler preempts it in
/// the middle of its poll, and a submitter that saw it polling does not wake
/// it: the work then waits a whole time slice (milliseconds) instead of a
/// wake-up. So a poll that notices it was preempted (two consecutive looks
/// at the clock further apart than `preemptionGap`) stops at once, and
/// polling pauses for `pauseNanoseconds`; sleepers are woken, and the woken
/// thread gets the CPU at once (the scheduler favours a thread that slept).
/// After the pause the next idle thread tries polling again.
@usableFromInline
package final class IdleSpin: Sendable {
    /// A longer gap between two looks at the clock means the poller lost its CPU.
    @usableFromInline package static let preemptionGap: UInt64 = 20_000
    /// How long polling stays off after a preempted poll; doubled for each
    /// further preempted poll within `streakNanoseconds` of the last, up
    /// to 32 times (3.2 s). On a machine that stays loaded, each preempted
    /// poll costs the poller a wait behind the other runnable threads
    /// (milliseconds: a thread that polls has no wake-up credit); a fixed
    /// 100 ms pause let that happen ten times a second, 3% of a 1 ms
    /// timer's fires (its p99: 4.5 ms late against Dispatch's 0.1–1.4 ms).
    @usableFromInline package static let pauseNanoseconds: UInt64 = 100_000_000
    /// Preempted polls further apart than this start a new streak.
    @usableFromInline package static let streakNanoseconds: UInt64 = 10_000_000_000

    @usableFromInline package let budget: UInt64
    // `@usableFromInline`: the poll loop is inlined into the worker pool and
    // the ring thread, other modules.
    @usableFromInline let pausedUntil = Atomic<UInt64>(0)
    @usableFromInline let preemptions = Atomic<UInt64>(0)
    /// Preempted polls in the current streak, and when the last one was.
    @usableFromInline let streak = Atomic<UInt64>(0)
    @usableFromInline let lastPreemption = Atomic<UInt64>(0)
    /// The poller's last look at the clock (see `pollerStalled(now:)`).
    @usableFromInline let lastLook = Atomic<UInt64>(0)

    package init(budget: UInt64) { self.budget = budget }

    /// Preempted polls so far (for tests and diagnostics).
    package var preemptedPolls: UInt64 { preemptions.load(ordering: .relaxed) }

    /// Marks the start of a poll (`now`: the caller's clock), before the
    /// poll itself: a submitter then sees a fresh look from the moment the
    /// poller announces itself.
    @inlinable @inline(__always)
    package func announce(now: UInt64) { lastLook.store(now, ordering: .relaxed) }

    /// Whether the thread that announced a poll has not looked at the clock
    /// for `stallNanoseconds`: it lost its CPU (or never started), so work
    /// left to it waits a time slice. A submitter then wakes a sleeper
    /// instead of counting on the poller.
    @inlinable @inline(__always)
    package func pollerStalled(now: UInt64) -> Bool {
        // A look newer than `now` (the caller read its clock first) is fresh.
        let last = lastLook.load(ordering: .relaxed)
        return now > last && now - last > IdleSpin.stallNanoseconds
    }

    /// A poller silent for longer than this has lost its CPU (see
    /// `pollerStalled(now:)`).
    @usableFromInline package static let stallNanoseconds: UInt64 = 50_000

    /// Whether an idle thread should poll now (not paused, and a budget set).
    @inlinable @inline(__always)
    package var allowed: Bool {
        budget > 0 && monotonicNanoseconds() >= pausedUntil.load(ordering: .relaxed)
    }

    /// A poll lost its CPU at `now`: pauses polling, longer for each
    /// preemption in a streak (see `pauseNanoseconds`). Returns the end of
    /// the pause. (Racing pollers may both count: a longer pause, no harm.)
    @inlinable @discardableResult
    package func notePreemption(now: UInt64) -> UInt64 {
        let last = lastPreemption.exchange(now, ordering: .relaxed)
        var n: UInt64 = 1
        if last == 0 || now &- last > IdleSpin.streakNanoseconds {
            streak.store(1, ordering: .relaxed)
        } else {
            n = streak.add(1, ordering: .relaxed).newValue
        }
        let until = now &+ (IdleSpin.pauseNanoseconds << Swift.min(n - 1, 5))
        pausedUntil.store(until, ordering: .relaxed)
        preemptions.add(1, ordering: .relaxed)
        return until
    }

    /// Polls `ready` for up to `budget` nanoseconds; returns whether it saw
    /// work. Returns false at once when polling is paused.
    @inlinable @inline(__always)
    package func poll(_ ready: () -> Bool) -> Bool {
        guard budget > 0 else { return false }
        var now = monotonicNanoseconds()
        guard now >= pausedUntil.load(ordering: .relaxed) else { return false }
        let deadline = now &+ budget
        while true {
            if ready() { return true }
            let later = monotonicNanoseconds()
            lastLook.store(later, ordering: .relaxed)
            if later &- now > IdleSpin.preemptionGap {
                notePreemption(now: later)
                return ready()
            }
            now = later
            if now >= deadline { return false }
        }
    }
}
