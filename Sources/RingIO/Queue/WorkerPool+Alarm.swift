import Synchronization
import RingIOBase

/// A deadline that an idle pool worker sleeps until, then runs `fire` on
/// itself: the timer services' wake-up.
///
/// ```
///  schedule(alarm, at: d) ──▶ the keeper (one idle worker) sleeps until d
///                                 │ wakes (one thread wake-up)
///  fire() on the keeper ──▶ enqueues the handlers ──▶ the keeper runs them
/// ```
///
/// A timer then costs one thread wake-up per fire: the keeper's. (A ring
/// timeout cost two: the ring thread left `io_uring_enter`, then the worker
/// it handed the handler to left its futex, and each waited for a CPU on a
/// busy machine.) While polling is allowed (`IdleSpin`) the keeper wakes its
/// recent wake-up latency early and polls the clock up to the deadline. The
/// keeper's timed sleeps have 1 µs of timer slack, not Linux's 50 µs.
///
/// A handler that re-arms its timer wakes nobody: its worker keeps the
/// alarm when the handler returns (on a busy machine, where that worker may
/// lose its CPU first, a sleeping worker is woken to keep it). While no
/// worker is idle to keep the alarms (every one runs a job), the pool's
/// watchdog fires what is due, `keeperlessGraceNanoseconds` after the
/// deadline once it looks (it polls every `stallNanoseconds` while the pool
/// is in use): the handlers then wait for a worker in any case.
package final class PoolAlarm: @unchecked Sendable {
    // @unchecked: `deadline` is read and written only with the pool's lock
    // held; `fire` is immutable.
    let fire: @Sendable () -> Void
    /// CLOCK_MONOTONIC nanoseconds; nil: not scheduled.
    var deadline: UInt64?

    /// - Parameter fire: runs on a pool worker (or the watchdog), outside
    ///   every pool lock, at or after the scheduled deadline. It must be
    ///   short: it enqueues work. The alarm is unscheduled when it runs.
    package init(_ fire: @escaping @Sendable () -> Void) { self.fire = fire }
}

extension WorkerPool {
    /// The most a due alarm waits for the watchdog while no worker keeps
    /// the alarms.
    static let keeperlessGraceNanoseconds: UInt64 = 500_000
    /// The most the keeper wakes before a deadline to poll up to it.
    static let maximumEarlyNanoseconds: UInt64 = 200_000
    /// Alarms firing closer together than this are `alarmsFrequent`.
    static let frequentAlarmNanoseconds: UInt64 = 500_000
    /// While alarms are frequent, fires due this close together share the
    /// keeper's wake-up.
    static let frequentCoalesceNanoseconds: UInt64 = 50_000

    /// Schedules (or moves) `alarm` to fire at `deadline` (CLOCK_MONOTONIC
    /// nanoseconds). Never early: `fire` runs once the clock has reached
    /// `deadline`.
    package func schedule(_ alarm: PoolAlarm, atNanoseconds deadline: UInt64) {
        var spawn = false
        var spawnWatchdog = false
        let onWorker = Self.workerMarker.value != nil
        lock.lock()
        if alarm.deadline == nil { alarms.append(alarm) }
        alarm.deadline = deadline
        let earliest = Swift.min(earliestAlarm.load(ordering: .relaxed), deadline)
        earliestAlarm.store(earliest, ordering: .relaxed)
        // A poll keeper that keeps the alarms too (no keeper did when it
        // began to wait) looks again.
        if pollWaiting && pollUntil != .max && deadline < pollUntil { wakePollKeeperLocked() }
        if keeperWaiting {
            if deadline < keeperUntil { keeperCondition.signal() }
        } else if spinning || firingWorkers > 0 {
            // The polling worker sees `earliestAlarm`; a firing one looks
            // again when it is done.
        } else if onWorker && spin.allowed {
            // A handler re-arming its timer: this worker keeps the alarms
            // when its job ends (no wake-up for a sleeper); the watchdog
            // covers a long job. Not on a busy machine (polling paused):
            // there this worker may lose its CPU for a time slice or more
            // before it sleeps as the keeper, and a sleeper woken now
            // keeps the alarm instead.
            spawnWatchdog = needWatchdogLocked()
        } else if idle > 0 {
            lock.signal()  // a sleeper wakes and keeps the alarms
        } else if threads < baseThreads {
            threads += 1
            spawn = true
        } else {
            spawnWatchdog = needWatchdogLocked()
        }
        lock.unlock()
        if spawn { startWorker(extra: false) }
        if spawnWatchdog { startWatchdog() }
    }

    /// Marks the pool's workers (set at their start).
    static let workerMarker = ThreadLocalPointer()

    /// Under the lock: the watchdog is needed (alarms may be unkept for a
    /// while): wakes it when asleep; returns true when it must be started.
    func needWatchdogLocked() -> Bool {
        if !watchdogRunning {
            watchdogRunning = true
            return true
        }
        if watchdogAsleep {
            watchdogAsleep = false
            watchdogCondition.signal()
        }
        return false
    }

    /// Unschedules `alarm`; it does not fire (unless it is firing now).
    package func unschedule(_ alarm: PoolAlarm) {
        lock.withLock {
            guard alarm.deadline != nil else { return }
            alarm.deadline = nil
            alarms.removeAll { $0 === alarm }
            refreshEarliest()
        }
    }

    /// Under the lock: recomputes `earliestAlarm`.
    func refreshEarliest() {
        var earliest = UInt64.max
        for a in alarms { if let d = a.deadline, d < earliest { earliest = d } }
        earliestAlarm.store(earliest, ordering: .relaxed)
    }

    /// Under the lock: the first alarm due by `now`, unscheduled.
    func takeDueAlarm(now: UInt64) -> PoolAlarm? {
        guard earliestAlarm.load(ordering: .relaxed) <= now,
              let i = alarms.firstIndex(where: { ($0.deadline ?? .max) <= now }) else { return nil }
        let alarm = alarms.remove(at: i)
        alarm.deadline = nil
        refreshEarliest()
        return alarm
    }

    /// Under the lock: fires one alarm due now, with the lock released
    /// around its `fire`; returns whether one fired. (One: the caller takes
    /// the jobs it enqueued before it fires again, or timers due faster
    /// than they fire would starve them.) On a worker (`byWorker`), submits
    /// meanwhile wake no other worker: this one takes their jobs next.
    @discardableResult
    func fireDueAlarm(byWorker: Bool) -> Bool {
        let now = monotonicNanoseconds()
        // A worker between jobs leaves frequent alarms to the keeper's
        // next wake-up, unless they are due past the coalescing window.
        let by = byWorker && alarmsFrequent && !keeperWaiting ? now &- Self.frequentCoalesceNanoseconds : now
        guard let alarm = takeDueAlarm(now: by) else { return false }
        alarmsFrequent = now &- lastAlarmFire < Self.frequentAlarmNanoseconds
        lastAlarmFire = now
        if byWorker { firingWorkers += 1 }
        lock.unlock()
        DeliveryBatch().collect { alarm.fire() }
        lock.lock()
        if byWorker { firingWorkers -= 1 }
        return true
    }

    /// Under the lock: alarms are scheduled and no worker keeps them.
    var alarmsUnkept: Bool {
        !keeperWaiting && !(pollWaiting && pollUntil != .max) && !spinning && firingWorkers == 0 && earliestAlarm.load(ordering: .relaxed) != .max
    }

    /// Under the lock, on an idle worker with alarms scheduled and no
    /// keeper: keeps them, sleeping until the earliest (its recent wake-up
    /// latency early while polling is allowed, then polling the clock up
    /// to it). Returns when an alarm is due, a job came, or an earlier
    /// alarm was scheduled.
    ///
    /// While alarms fire often (`alarmsFrequent`: many timers), nothing
    /// polls and the keeper sleeps `frequentCoalesceNanoseconds` past the
    /// deadline, so that the fires due meanwhile share its wake-up: firing
    /// them one by one cost twice the CPU per fire.
    func keepAlarms() {
        let earliest = earliestAlarm.load(ordering: .relaxed)
        let early = spin.allowed && !alarmsFrequent
            ? Swift.min(keeperWakeLatency + keeperWakeLatency / 2, Self.maximumEarlyNanoseconds) : 0
        let until = alarmsFrequent ? earliest &+ Self.frequentCoalesceNanoseconds
            : earliest > early ? earliest - early : 0
        if until > monotonicNanoseconds() {
            keeperWaiting = true
            keeperUntil = until
            let signalled = keeperCondition.wait(untilNanoseconds: until)
            keeperWaiting = false
            if !signalled && !alarmsFrequent {
                let late = Swift.min(monotonicNanoseconds() &- until, 2 * Self.maximumEarlyNanoseconds)
                keeperWakeLatency = (keeperWakeLatency * 7 + late) / 8
            }
        }
        // Early (or the deadline came while polling is on): poll the clock
        // up to it, as the pool's polling worker, so that a job submitted
        // meanwhile is taken too.
        guard !jobs.hasStartable, !spinning, early > 0,
              monotonicNanoseconds() < earliestAlarm.load(ordering: .relaxed) else { return }
        spinning = true
        spin.announce(now: monotonicNanoseconds())
        let seen = submissions.load(ordering: .acquiring)
        lock.unlock()
        _ = spin.poll {
            submissions.load(ordering: .acquiring) != seen
                || monotonicNanoseconds() >= earliestAlarm.load(ordering: .relaxed)
        }
        lock.lock()
        spinning = false
    }
}
