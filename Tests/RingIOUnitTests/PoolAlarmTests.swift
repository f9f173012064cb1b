import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIOQueue
@testable import RingIOEngine
@testable import RingIOBase

/// The worker pool's alarm: an idle worker sleeps until the deadline and
/// fires on itself (the timer services' wake-up).
@Suite("Worker pool alarms")
struct PoolAlarmTests {
    @Test("the watchdog, having woken a sleeper for an overdue alarm, looks again only after the grace from now (it looked again at once: a busy loop)")
    func watchdogGivesTheWokenSleeperItsGrace() {
        let grace = WorkerPool.keeperlessGraceNanoseconds
        let now: UInt64 = 50_000_000
        // An alarm 10 ms overdue: its grace is long past.
        let overdue = now - 10_000_000
        #expect(WorkerPool.watchdogWake(now: now, unkeptAlarm: overdue, wokeSleeper: true) == now + grace)
        // Not woken (it fired the alarm itself): what is due next is due at once.
        #expect(WorkerPool.watchdogWake(now: now, unkeptAlarm: overdue, wokeSleeper: false) == overdue + grace)
        // An alarm ahead: its grace after it; none: the stall period.
        #expect(WorkerPool.watchdogWake(now: now, unkeptAlarm: now + 1_000_000, wokeSleeper: false) == now + 1_000_000 + grace)
        #expect(WorkerPool.watchdogWake(now: now, unkeptAlarm: nil, wokeSleeper: false) == now + WorkerPool.stallNanoseconds)
    }

    @Test("an alarm fires once, never before its deadline; a moved alarm fires at its new deadline only")
    func firesOnceNeverEarly() {
        let pool = WorkerPool.shared
        let fires = Atomic<Int>(0)
        let firedAt = Atomic<UInt64>(0)
        let done = Latch()
        let alarm = PoolAlarm {
            firedAt.store(monotonicNanoseconds(), ordering: .relaxed)
            if fires.add(1, ordering: .relaxed).newValue == 1 { done.signal() }
        }
        // First an hour away, then moved to 2 ms from now.
        pool.schedule(alarm, atNanoseconds: monotonicNanoseconds() + 3_600_000_000_000)
        let deadline = monotonicNanoseconds() + 2_000_000
        pool.schedule(alarm, atNanoseconds: deadline)
        #expect(done.wait(timeout: .seconds(300)))
        let at = firedAt.load(ordering: .relaxed)
        #expect(at >= deadline)
        // A second alarm, later, fired after it: the first did not fire again.
        let later = Latch()
        let second = PoolAlarm { later.signal() }
        pool.schedule(second, atNanoseconds: monotonicNanoseconds() + 5_000_000)
        #expect(later.wait(timeout: .seconds(300)))
        let count = fires.load(ordering: .relaxed)
        #expect(count == 1)
        pool.unschedule(alarm)
    }

    @Test("an unscheduled alarm does not fire")
    func unscheduledDoesNotFire() {
        let pool = WorkerPool.shared
        let fired = Atomic<Bool>(false)
        let alarm = PoolAlarm { fired.store(true, ordering: .relaxed) }
        pool.schedule(alarm, atNanoseconds: monotonicNanoseconds() + 3_600_000_000_000)
        pool.unschedule(alarm)
        // Another alarm due now, and one after it, fire; the first never does.
        let done = Latch()
        let other = PoolAlarm { done.signal() }
        pool.schedule(other, atNanoseconds: monotonicNanoseconds())
        #expect(done.wait(timeout: .seconds(300)))
        let didFire = fired.load(ordering: .relaxed)
        #expect(!didFire)
    }

    @Test("an alarm due while every worker runs a job still fires (the watchdog keeps the alarms)")
    func firesWhileEveryWorkerIsBusy() {
        let pool = WorkerPool.shared
        let count = pool.baseThreads
        let started = Latch(count: count)
        let release = Latch()
        // Every base worker blocks in a job until the alarm has fired.
        // (Other tests' jobs may take workers too: the watchdog then adds
        // some, and these start on them.)
        for _ in 0..<count {
            pool.submit(.plain({
                started.signal()
                _ = release.wait(timeout: .seconds(300))
            }, level: IOQueue.Priority.default.rawValue))
        }
        #expect(started.wait(timeout: .seconds(300)))
        let fired = Latch()
        let alarm = PoolAlarm {
            fired.signal()
            release.signal()
        }
        pool.schedule(alarm, atNanoseconds: monotonicNanoseconds() + 1_000_000)
        #expect(fired.wait(timeout: .seconds(300)))
    }
}

/// The engine's timer service on the pool's alarm.
@Suite("Engine timer fires")
struct EngineTimerFireTests {
    @Test("one worker fires at a time: a second alarm during a fire leaves the due timers to the first")
    func firesNeverOverlap() {
        // Interval ticks fired on many workers at once hung LoadTests under
        // ThreadSanitizer (see `EngineTimerService.alarmEnded`). Here the
        // pool fires the first timer, whose fire waits; meanwhile this
        // thread plays a second worker whose alarm ended when the second
        // timer came due.
        let timers = EngineTimerService()
        let inside = Atomic<Int>(0)
        let overlapped = Atomic<Bool>(false)
        let firstRunning = Latch()
        let release = Latch()
        let secondFired = Latch()
        let now = ContinuousClock.now
        _ = timers.arm(deadline: now, leeway: .zero) {
            inside.add(1, ordering: .sequentiallyConsistent)
            firstRunning.signal()
            _ = release.wait(timeout: .seconds(300))
            inside.subtract(1, ordering: .sequentiallyConsistent)
        }
        _ = timers.arm(deadline: now + .milliseconds(1), leeway: .zero) {
            if inside.load(ordering: .sequentiallyConsistent) != 0 { overlapped.store(true, ordering: .relaxed) }
            secondFired.signal()
        }
        #expect(firstRunning.wait(timeout: .seconds(300)))
        while ContinuousClock.now < now + .milliseconds(2) { sleepNanoseconds(100_000) }
        timers.alarmEnded()
        release.signal()
        #expect(secondFired.wait(timeout: .seconds(300)))
        let didOverlap = overlapped.load(ordering: .relaxed)
        #expect(!didOverlap)
        #expect(waitUntil(timeout: .seconds(300)) { timers.count == 0 })
    }

    @Test("a pool job holding the last reference to a timer service: its deinit runs outside the pool's lock")
    func lastReferenceInAJob() {
        // The service's deinit unschedules its alarm, which takes the pool's
        // lock: a worker that dropped its job under that lock deadlocked.
        let pool = WorkerPool.shared
        let released = Latch()
        let ran = Latch()
        weak var gone: EngineTimerService?
        do {
            let timers = EngineTimerService()
            gone = timers
            _ = timers.arm(deadline: .now + .seconds(3600), leeway: .zero) {}
            pool.submit(.plain({
                _ = released.wait(timeout: .seconds(300))
                withExtendedLifetime(timers) {}
                ran.signal()
            }, level: IOQueue.Priority.default.rawValue))
        }
        released.signal()
        #expect(ran.wait(timeout: .seconds(300)))
        #expect(waitUntil(timeout: .seconds(300)) { gone == nil })
        // The pool still takes jobs (from another thread: a deadlocked pool
        // would block the submit itself).
        let next = Latch()
        spawnThread(name: "submitter") {
            pool.submit(.plain({ next.signal() }, level: IOQueue.Priority.default.rawValue))
        }
        #expect(next.wait(timeout: .seconds(300)))
    }
}

@Suite("Worker pool readiness: last references")
struct PoolReadinessLastReferenceTests {
    @Test("a readiness handler holding the last reference to a timer service: its deinit runs outside the pool's lock")
    func lastReferenceInAReadinessHandler() throws {
        // The handler stops its own watch, so the poll keeper's (or the
        // watchdog's) list of ready handlers holds the last reference to
        // it; the service's deinit then takes the pool's lock. Dropping
        // that list under the lock deadlocked the pool (found by CI's ASan
        // run: a source cancelled while its readiness was being handled).
        let pool = WorkerPool.shared
        let fds = try Syscall.pipe(capacity: 4096)
        defer {
            Syscall.closeIgnoringErrors(fds.read)
            Syscall.closeIgnoringErrors(fds.write)
        }
        let ran = Latch()
        let watchBox = Locked<PoolWatch?>(nil)
        weak var gone: EngineTimerService?
        do {
            let timers = EngineTimerService()
            gone = timers
            _ = timers.arm(deadline: .now + .seconds(3600), leeway: .zero) {}
            let watch = try pool.watch(fd: fds.read, events: Syscall.epollIn) { [timers] _ in
                withExtendedLifetime(timers) {}
                watchBox.withLock { $0 }?.stop()
                ran.signal()
            }
            watchBox.withLock { $0 = watch }
        }
        var byte: UInt8 = 1
        _ = try withUnsafeBytes(of: &byte) { try Syscall.write(fds.write, from: $0) }
        #expect(ran.wait(timeout: .seconds(300)))
        #expect(waitUntil(timeout: .seconds(300)) { gone == nil })
        watchBox.withLock { $0 = nil }
        // The pool still takes jobs (from another thread: a deadlocked pool
        // would block the submit itself).
        let next = Latch()
        spawnThread(name: "submitter") {
            pool.submit(.plain({ next.signal() }, level: IOQueue.Priority.default.rawValue))
        }
        #expect(next.wait(timeout: .seconds(300)))
    }
}
