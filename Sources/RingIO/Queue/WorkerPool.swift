#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import RingIOBase

/// A unit of work the pool runs: draining a serial queue, or one item of a
/// concurrent queue.
package enum PoolJob: Sendable {
    case drain(IOQueue)
    case concurrent(IOQueue, @Sendable () -> Void, barrier: Bool)
    /// Work of no queue at a priority level (`concurrentPerform`'s helpers).
    case plain(@Sendable () -> Void, level: Int)

    /// The priority level the pool starts it at (`IOQueue.Priority.rawValue`).
    @inline(__always)
    var level: Int {
        switch self {
        case .drain(let queue), .concurrent(let queue, _, _): return queue.level
        case .plain(_, let level): return level
        }
    }
}

/// The library's own worker threads, shared by every `IOQueue`.
///
/// The pool starts with one thread per core (at least two), created on demand.
/// A watchdog thread (started the first time a job has to wait for a busy
/// worker) notices when jobs are waiting, no worker is idle and no
/// job has been started for `stallNanoseconds`: every worker is then blocked
/// (in a `sync`, a semaphore, a slow syscall in a handler), and the watchdog
/// adds one thread, up to `maximumThreads`. Threads beyond the base number exit
/// after `extraIdleNanoseconds` without work. One idle worker at a time polls
/// for `spinNanoseconds` before it sleeps, so that a handler enqueued right
/// after the previous one starts without a thread wake-up (not while the
/// machine is busy: see `IdleSpin`); a submit that finds the poller silent
/// for `IdleSpin.stallNanoseconds` (preempted) wakes a sleeper instead of
/// leaving the job to it. One idle worker also keeps the timers' alarms
/// (`PoolAlarm`): it sleeps until the earliest deadline and runs what fires
/// itself. A blocked work item therefore
/// delays other queues by a few milliseconds at most; it cannot starve them.
package final class WorkerPool: @unchecked Sendable {
    // @unchecked: every stored `var` is read and written only with `lock` held.
    package static let shared = WorkerPool()

    static let stallNanoseconds: UInt64 = 4_000_000
    static let watchdogSleepAfterNanoseconds: UInt64 = 1_000_000_000
    static let extraIdleNanoseconds: UInt64 = 10_000_000_000
    static let maximumThreads = 64
    /// `.background` jobs waiting at their width with none started or ended
    /// for this long: the running ones are taken as blocked, and one more
    /// may start (see `PriorityJobs`).
    static let backgroundStallNanoseconds: UInt64 = 20_000_000
    /// How long one idle worker polls for new work before it sleeps.
    static let spinNanoseconds: UInt64 = 50_000
    /// The polling, paused while the machine is busy (see `IdleSpin`).
    let spin = IdleSpin(budget: WorkerPool.spinNanoseconds)

    let lock = ConditionLock()
    let watchdogCondition: Condition
    var jobs: PriorityJobs
    var threads = 0
    /// Workers asleep on `lock`'s condition (not the keeper).
    var idle = 0
    private var started: UInt64 = 0
    /// A worker is polling for work instead of sleeping (at most one at a time).
    var spinning = false
    /// Bumped by every submit; what the spinning worker polls.
    let submissions = Atomic<UInt64>(0)
    var watchdogRunning = false
    var watchdogAsleep = false
    /// The alarms scheduled (`PoolAlarm`), and the earliest of their
    /// deadlines (`.max`: none; an atomic, for the polling worker).
    var alarms: [PoolAlarm] = []
    let earliestAlarm = Atomic<UInt64>(.max)
    /// An idle worker sleeps on `keeperCondition` until the earliest alarm
    /// (`keeperUntil`).
    var keeperWaiting = false
    var keeperUntil: UInt64 = 0
    let keeperCondition: Condition
    /// How late the keeper wakes from its timed sleep, lately (a moving average).
    var keeperWakeLatency: UInt64 = 20_000
    /// Workers firing alarms now (they take the jobs those submit).
    var firingWorkers = 0
    /// When an alarm last fired, and whether alarms fire often (see
    /// `keepAlarms`).
    var lastAlarmFire: UInt64 = 0
    var alarmsFrequent = false
    /// The read and write sources' fds (made on first use), the worker
    /// waiting on them (the poll keeper), whether it was woken, and its
    /// wait's end (see WorkerPool+Readiness.swift).
    var poller: PoolPoller?
    var pollWaiting = false
    var pollWoken = false
    var pollUntil: UInt64 = .max
    let baseThreads: Int

    private init() {
        watchdogCondition = Condition(lock: lock)
        keeperCondition = Condition(lock: lock)
        let cores = Syscall.onlineProcessors()
        baseThreads = Swift.max(2, cores)
        jobs = PriorityJobs(backgroundWidth: Swift.max(1, baseThreads - 1))
    }

    /// The number of worker threads alive now (for tests and diagnostics).
    var threadCount: Int { lock.withLock { threads } }

    package func submit(_ job: PoolJob) {
        submitLocked { $0.append(job) }
    }

    /// Several jobs with one lock and at most one wake-up (a woken worker
    /// wakes the next while jobs are left).
    package func submit(contentsOf jobs: [PoolJob]) {
        submitLocked { queue in for job in jobs { queue.append(job) } }
    }

    @inline(__always)
    private func submitLocked(_ add: (inout PriorityJobs) -> Void) {
        var spawn = false
        var spawnWatchdog = false
        lock.lock()
        add(&jobs)
        submissions.add(1, ordering: .releasing)
        if spinning && (idle > 0 || keeperWaiting || pollWaiting) && jobs.hasStartable
            && spin.pollerStalled(now: monotonicNanoseconds()) {
            // The polling worker has not looked for 50 µs: it lost its CPU
            // (beside busy threads, for a time slice). A sleeper takes the
            // job instead.
            wakeOneLocked()
        } else if spinning || firingWorkers > 0 || !jobs.hasStartable {
            // The spinning worker takes it, or the worker firing alarms
            // (this is one of the jobs they enqueue); or it is a
            // `.background` job that waits for a running one to end (that
            // worker takes it).
        } else if idle > 0 || keeperWaiting || pollWaiting {
            wakeOneLocked()
        } else if threads < baseThreads {
            threads += 1
            spawn = true
        }
        // The watchdog starts the first time a job may wait for a busy
        // worker: more jobs queued than idle, polling or new workers to take
        // them. Until then no stall is possible (a program that never has two
        // jobs at once never starts it). From then on it polls while the
        // pool is in use; it sleeps only after a second of complete idleness,
        // and the next submit wakes it.
        if !watchdogRunning {
            if jobs.count > idle + (keeperWaiting ? 1 : 0) + (pollWaiting ? 1 : 0) + (spinning ? 1 : 0) + firingWorkers
                + (spawn ? 1 : 0)
                || (jobs.backgroundFull && jobs.waitingBackground > 0) {
                watchdogRunning = true
                spawnWatchdog = true
            }
        } else if watchdogAsleep {
            watchdogAsleep = false
            watchdogCondition.signal()
        }
        lock.unlock()
        if spawn { startWorker(extra: false) }
        if spawnWatchdog { startWatchdog() }
    }

    /// Under the lock: wakes a sleeping worker, or else the keeper (which
    /// then leaves the alarms to the watchdog while it runs the job), or
    /// else the poll keeper.
    @inline(__always)
    func wakeOneLocked() {
        if idle > 0 {
            lock.signal()
        } else if keeperWaiting {
            keeperCondition.signal()
        } else if pollWaiting {
            wakePollKeeperLocked()
        }
    }

    func startWatchdog() {
        if spawnThread(name: "ringio-watchdog", { [self] in watchdogLoop() }) != 0 {
            lock.withLock { watchdogRunning = false }
        }
    }

    func startWorker(extra: Bool) {
        let rc = spawnThread(name: "ringio-worker") { [self] in workerLoop(extra: extra) }
        if rc != 0 {
            // No thread (resource limit): the work waits for the existing
            // ones, and the watchdog tries again later.
            let watchdog = lock.withLock { () -> Bool in
                threads -= 1
                if watchdogRunning { return false }
                watchdogRunning = true
                return true
            }
            if watchdog { startWatchdog() }
        }
    }

    private func workerLoop(extra: Bool) {
        // Timed sleeps (the alarm keeper's) end on time, not up to 50 µs late.
        try? Syscall.setTimerSlack(nanoseconds: 1_000)
        Self.workerMarker.value = UnsafeMutableRawPointer(bitPattern: 1)
        lock.lock()
        while true {
            if let (job, level) = jobs.popFirst() {
                started &+= 1
                if jobs.hasStartable && !spinning { wakeOneLocked() }
                // No worker keeps the alarms (or waits on the watched fds)
                // while this one runs its job: the watchdog does (see
                // `PoolAlarm`, `PoolPoller`).
                let spawnWatchdog = (alarmsUnkept || readinessUnkept) && needWatchdogLocked()
                lock.unlock()
                if spawnWatchdog { startWatchdog() }
                // `consume`: the job's references go here, outside the
                // lock. Dropped after `lock.lock()` (where a debug build
                // ends the binding's life), the last reference to an engine
                // ran its timer service's deinit, which unschedules its
                // alarm under this same lock: the worker deadlocked on
                // itself, and every thread after it on the pool.
                run(consume job)
                lock.lock()
                jobs.finished(level: level)
                continue
            }
            if fireDueAlarm(byWorker: true) { continue }
            // Watched fds no worker waits on: this one does (before polling:
            // the next readiness is often the job that comes next).
            if !extra && keepReadiness() { continue }
            if !spinning && spin.allowed {
                // Poll for a short while before sleeping: waking a sleeping
                // thread costs 5–50 µs, more than most handlers take.
                spinning = true
                spin.announce(now: monotonicNanoseconds())
                let seen = submissions.load(ordering: .acquiring)
                // (Frequent alarms wait for the keeper's wake-up, in batches.)
                let watchAlarms = !alarmsFrequent
                lock.unlock()
                _ = spin.poll {
                    submissions.load(ordering: .acquiring) != seen
                        || (watchAlarms && monotonicNanoseconds() >= earliestAlarm.load(ordering: .relaxed))
                }
                lock.lock()
                spinning = false
                if jobs.hasStartable || (!alarmsFrequent && earliestAlarm.load(ordering: .relaxed) <= monotonicNanoseconds()) {
                    continue
                }
            }
            if !extra && !keeperWaiting && !spinning && earliestAlarm.load(ordering: .relaxed) != .max {
                keepAlarms()
                continue
            }
            if !extra && keepReadiness() { continue }
            idle += 1
            if extra {
                let deadline = monotonicNanoseconds() + Self.extraIdleNanoseconds
                let signalled = lock.wait(untilNanoseconds: deadline)
                idle -= 1
                if !signalled && !jobs.hasStartable {
                    threads -= 1
                    lock.unlock()
                    return
                }
            } else {
                lock.wait()
                idle -= 1
            }
        }
    }

    private func run(_ job: PoolJob) {
        switch job {
        case .drain(let queue):
            queue.drainSerial()
        case .concurrent(let queue, let work, let barrier):
            queue.runConcurrent(work, barrier: barrier)
        case .plain(let work, _):
            work()
        }
    }

    /// When the watchdog looks again: after `stallNanoseconds`, or, with
    /// an alarm no worker keeps (`unkeptAlarm`, its deadline), its grace
    /// after it. After waking a sleeper for a due alarm, not before the
    /// grace from now: the sleeper may wait that long for a CPU on a busy
    /// machine, and looking again at once (the deadline is past) signalled
    /// it over and over, a busy loop beside it.
    static func watchdogWake(now: UInt64, unkeptAlarm: UInt64?, wokeSleeper: Bool) -> UInt64 {
        var until = now &+ stallNanoseconds
        if let alarm = unkeptAlarm {
            var due = alarm &+ keeperlessGraceNanoseconds
            if wokeSleeper { due = Swift.max(due, now &+ keeperlessGraceNanoseconds) }
            until = Swift.min(until, due)
        }
        return until
    }

    private func watchdogLoop() {
        try? Syscall.setTimerSlack(nanoseconds: 1_000)
        lock.lock()
        var idleSince: UInt64?
        var backgroundSeen = jobs.backgroundProgress
        var backgroundSince = monotonicNanoseconds()
        while true {
            let now = monotonicNanoseconds()
            let poolIdle = jobs.isEmpty && !readinessUnkept
                && idle + (spinning ? 1 : 0) + (keeperWaiting ? 1 : 0) + (pollWaiting ? 1 : 0) == threads
            if poolIdle {
                if let since = idleSince, now - since > Self.watchdogSleepAfterNanoseconds {
                    watchdogAsleep = true
                    while watchdogAsleep { watchdogCondition.wait() }
                    idleSince = nil
                    continue
                }
                if idleSince == nil { idleSince = now }
            } else {
                idleSince = nil
            }
            if jobs.backgroundProgress != backgroundSeen || !(jobs.backgroundFull && jobs.waitingBackground > 0) {
                backgroundSeen = jobs.backgroundProgress
                backgroundSince = now
            } else if now - backgroundSince > Self.backgroundStallNanoseconds {
                // `.background` jobs wait at the width and the running ones
                // have neither ended nor let another start: they may wait
                // for a job behind them. One more may start (on an idle
                // worker, or on one the rule below adds).
                jobs.widen()
                backgroundSince = now
                if idle > 0 { lock.signal() }
            }
            var wokeSleeper = false
            if alarmsUnkept, earliestAlarm.load(ordering: .relaxed) <= now {
                // Every worker runs a job: none keeps the alarms. A sleeper
                // (an extra worker) fires them and takes their jobs; else
                // this thread fires them.
                if idle > 0 {
                    lock.signal()
                    wokeSleeper = true
                } else {
                    fireDueAlarm(byWorker: false)
                }
            }
            // The same for the watched fds: a sleeper may take the role (an
            // extra worker does not), and this thread reads them meanwhile.
            if readinessUnkept {
                if idle > 0 { lock.signal() }
                pollReadinessFromWatchdog()
            }
            let before = started
            let waiting = jobs.hasStartable && idle == 0 && !keeperWaiting && !pollWaiting
            var until = Self.watchdogWake(now: now, unkeptAlarm: alarmsUnkept ? earliestAlarm.load(ordering: .relaxed) : nil,
                                          wokeSleeper: wokeSleeper)
            // Watched fds no worker waits on: look again soon (a sleeper
            // then takes the role, or this thread looks at them).
            if readinessUnkept { until = Swift.min(until, now &+ Self.keeperlessGraceNanoseconds) }
            _ = watchdogCondition.wait(untilNanoseconds: until)
            if waiting && jobs.hasStartable && idle == 0 && !keeperWaiting && !pollWaiting && started == before && threads < Self.maximumThreads {
                // Jobs have waited a whole period with every worker busy and
                // none started: the workers are blocked. Add one.
                threads += 1
                lock.unlock()
                startWorker(extra: true)
                lock.lock()
            }
        }
    }
}
