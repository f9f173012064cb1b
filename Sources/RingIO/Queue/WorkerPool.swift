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
/// leaving the job to it. A blocked work item therefore
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

    private let lock = ConditionLock()
    private let watchdogCondition: Condition
    private var jobs: PriorityJobs
    private var threads = 0
    private var idle = 0
    private var started: UInt64 = 0
    /// A worker is polling for work instead of sleeping (at most one at a time).
    private var spinning = false
    /// Bumped by every submit; what the spinning worker polls.
    private let submissions = Atomic<UInt64>(0)
    private var watchdogRunning = false
    private var watchdogAsleep = false
    let baseThreads: Int

    private init() {
        watchdogCondition = Condition(lock: lock)
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
        if spinning && idle > 0 && jobs.hasStartable && spin.pollerStalled(now: monotonicNanoseconds()) {
            // The polling worker has not looked for 50 µs: it lost its CPU
            // (beside busy threads, for a time slice). A sleeper takes the
            // job instead.
            lock.signal()
        } else if spinning || !jobs.hasStartable {
            // The spinning worker takes it; or it is a `.background` job
            // that waits for a running one to end (that worker takes it).
        } else if idle > 0 {
            lock.signal()
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
            if jobs.count > idle + (spinning ? 1 : 0) + (spawn ? 1 : 0)
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

    /// Wakes one sleeping worker to poll for work, for a job expected
    /// within microseconds (a timer about to fire): the job then starts
    /// without a wake-up of its own. Nothing when a worker polls already,
    /// none sleeps, or polling is paused (a busy machine).
    package func prewake() {
        lock.lock()
        if !spinning && idle > 0 && spin.allowed { lock.signal() }
        lock.unlock()
    }

    private func startWatchdog() {
        if spawnThread(name: "ringio-watchdog", { [self] in watchdogLoop() }) != 0 {
            lock.withLock { watchdogRunning = false }
        }
    }

    private func startWorker(extra: Bool) {
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
        lock.lock()
        while true {
            if let (job, level) = jobs.popFirst() {
                started &+= 1
                if jobs.hasStartable && idle > 0 && !spinning { lock.signal() }
                lock.unlock()
                run(job)
                lock.lock()
                jobs.finished(level: level)
                continue
            }
            if !spinning && spin.allowed {
                // Poll for a short while before sleeping: waking a sleeping
                // thread costs 5–50 µs, more than most handlers take.
                spinning = true
                spin.announce(now: monotonicNanoseconds())
                let seen = submissions.load(ordering: .acquiring)
                lock.unlock()
                _ = spin.poll { submissions.load(ordering: .acquiring) != seen }
                lock.lock()
                spinning = false
                if jobs.hasStartable { continue }
            }
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

    private func watchdogLoop() {
        lock.lock()
        var idleSince: UInt64?
        var backgroundSeen = jobs.backgroundProgress
        var backgroundSince = monotonicNanoseconds()
        while true {
            let now = monotonicNanoseconds()
            let poolIdle = jobs.isEmpty && idle + (spinning ? 1 : 0) == threads
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
            let before = started
            let waiting = jobs.hasStartable && idle == 0
            _ = watchdogCondition.wait(untilNanoseconds: now + Self.stallNanoseconds)
            if waiting && jobs.hasStartable && idle == 0 && started == before && threads < Self.maximumThreads {
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
