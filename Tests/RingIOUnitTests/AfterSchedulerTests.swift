import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIOQueue
@testable import RingIOBase

/// A timer service the test fires by hand: it records every timer armed
/// (cancelled ones too, to replay a fire whose cancel came too late).
final class ManualTimerService: TimerService, @unchecked Sendable {
    // @unchecked: `timers` is `Locked`.
    struct Timer {
        let deadline: ContinuousClock.Instant
        let fire: @Sendable () -> Void
        var live = true
    }

    let timers = Locked<[Timer]>([])

    func arm(deadline: ContinuousClock.Instant, leeway: Duration,
             _ fire: @escaping @Sendable () -> Void) -> TimerToken {
        timers.withLock {
            $0.append(Timer(deadline: deadline, fire: fire))
            return TimerToken(id: UInt64($0.count - 1))
        }
    }

    @discardableResult
    func cancel(_ token: TimerToken) -> Bool {
        timers.withLock {
            let i = Int(token.id)
            guard $0[i].live else { return false }
            $0[i].live = false
            return true
        }
    }

    /// Timers armed and neither fired nor cancelled.
    var live: Int { timers.withLock { $0.filter(\.live).count } }
    /// Timers armed in all.
    var armed: Int { timers.withLock { $0.count } }

    /// Fires the live timers due by now (`early`: every live timer), as the
    /// service's thread would; returns how many fired.
    @discardableResult
    func fire(early: Bool = false) -> Int {
        let now = ContinuousClock.now
        let due = timers.withLock { timers -> [@Sendable () -> Void] in
            var due: [@Sendable () -> Void] = []
            for i in timers.indices where timers[i].live && (early || timers[i].deadline <= now) {
                timers[i].live = false
                due.append(timers[i].fire)
            }
            return due
        }
        for fire in due { fire() }
        return due.count
    }
}

@Suite("asyncAfter's scheduler: one service timer for every pending item")
struct AfterSchedulerTests {
    @Test("1,000 items keep one service timer armed; one expiry hands every due item over, in deadline order")
    func oneTimerForMany() {
        let service = ManualTimerService()
        let scheduler = AfterScheduler(services: TimerServiceRegistry(fallback: service))
        let queue = IOQueue(label: "after-many")
        let order = Locked<[Int]>([])
        let done = Latch(count: 1_000)
        let start = ContinuousClock.now + .milliseconds(2)
        // Latest first: each item is the new earliest, and replaces the timer.
        for i in (0..<1_000).reversed() {
            scheduler.schedule(.work({ order.withLock { $0.append(i) }; done.signal() }, barrier: false),
                               on: queue, at: start + .microseconds(i))
        }
        #expect(service.live == 1)
        #expect(scheduler.pendingCount == 1_000)
        #expect(waitUntil { ContinuousClock.now >= start + .microseconds(1_000) })
        #expect(service.fire() == 1)
        #expect(done.wait(timeout: .seconds(300)))
        #expect(order.withLock { $0 } == Array(0..<1_000))
        #expect(scheduler.pendingCount == 0)
        #expect(service.live == 0, "nothing left to arm")
    }

    @Test("an expiry before the earliest deadline hands nothing over and arms the timer again")
    func earlyExpiryRunsNothing() {
        let service = ManualTimerService()
        let scheduler = AfterScheduler(services: TimerServiceRegistry(fallback: service))
        let ran = Atomic<Int>(0)
        let deadline = ContinuousClock.now + .seconds(60)
        scheduler.schedule(.work({ ran.add(1, ordering: .relaxed) }, barrier: false),
                           on: IOQueue(label: "early"), at: deadline)
        #expect(service.fire(early: true) == 1)
        // The drain runs on a worker: it arms the next timer when it is done.
        #expect(waitUntil(timeout: .seconds(300)) { service.armed == 2 })
        #expect(service.live == 1)
        #expect(service.timers.withLock { $0.last!.deadline } >= deadline)
        #expect(scheduler.pendingCount == 1)
        #expect(ran.load(ordering: .relaxed) == 0)
    }

    @Test("a replaced timer that fires anyway (its cancel came too late) does nothing; each item runs once")
    func staleFireIgnored() {
        let service = ManualTimerService()
        let scheduler = AfterScheduler(services: TimerServiceRegistry(fallback: service))
        let queue = IOQueue(label: "stale")
        let ran = Atomic<Int>(0)
        let done = Latch(count: 2)
        let now = ContinuousClock.now
        scheduler.schedule(.work({ ran.add(1, ordering: .relaxed); done.signal() }, barrier: false),
                           on: queue, at: now + .milliseconds(2))
        scheduler.schedule(.work({ ran.add(1, ordering: .relaxed); done.signal() }, barrier: false),
                           on: queue, at: now + .milliseconds(1))
        #expect(service.armed == 2 && service.live == 1)
        // The first timer's fire, after its cancel.
        service.timers.withLock { $0[0].fire }()
        #expect(service.live == 1 && scheduler.pendingCount == 2)
        #expect(waitUntil { ContinuousClock.now >= now + .milliseconds(2) })
        #expect(service.fire() == 1)
        #expect(done.wait(timeout: .seconds(300)))
        #expect(ran.load(ordering: .relaxed) == 2)
        #expect(scheduler.pendingCount == 0)
    }

    @Test("items due together on a global queue each run once, whatever their number")
    func globalRunEachOnce() {
        for count in [1, 7, 8, 9, 64, 65, 1_000, 10_007] {
            let service = ManualTimerService()
            let scheduler = AfterScheduler(services: TimerServiceRegistry(fallback: service))
            let hits = Locked([Int](repeating: 0, count: count))
            let wrongQueue = Atomic<Int>(0)
            let done = Latch(count: count)
            let deadline = ContinuousClock.now + .milliseconds(1)
            for i in 0..<count {
                scheduler.schedule(.work({
                    if IOQueue.current !== IOQueue.global { wrongQueue.add(1, ordering: .relaxed) }
                    hits.withLock { $0[i] += 1 }
                    done.signal()
                }, barrier: false), on: IOQueue.global, at: deadline)
            }
            #expect(waitUntil { ContinuousClock.now >= deadline })
            #expect(service.fire() == 1)
            #expect(done.wait(timeout: .seconds(300)))
            #expect(hits.withLock { $0.allSatisfy { $0 == 1 } }, "\(count) items")
            #expect(wrongQueue.load(ordering: .relaxed) == 0)
        }
    }

    @Test("items that block until every other item of their run has run do not hold the others back")
    func blockedItemsLeaveTheRest() {
        let service = ManualTimerService()
        let scheduler = AfterScheduler(services: TimerServiceRegistry(fallback: service))
        let count = 200
        // More blockers than workers: every job of the run blocks in one, and
        // the run's queued job (on a thread the pool adds) must take the rest.
        let blockers = WorkerPool.shared.baseThreads + 1
        let others = Latch(count: count - blockers)
        let blocked = Latch(count: blockers)
        let deadline = ContinuousClock.now + .milliseconds(1)
        for i in 0..<count {
            scheduler.schedule(.work({
                if i < blockers {
                    _ = others.wait(timeout: .seconds(300))
                    blocked.signal()
                } else {
                    others.signal()
                }
            }, barrier: false), on: IOQueue.global, at: deadline)
        }
        #expect(waitUntil { ContinuousClock.now >= deadline })
        #expect(service.fire() == 1)
        #expect(others.wait(timeout: .seconds(300)))
        #expect(blocked.wait(timeout: .seconds(300)))
    }

    @Test("a call that finds items due hands them over itself, with no expiry of the service's timer")
    func callerHandsOverDueItems() {
        let service = ManualTimerService()
        let scheduler = AfterScheduler(services: TimerServiceRegistry(fallback: service))
        let queue = IOQueue(label: "caller")
        let order = Locked<[Int]>([])
        let done = Latch(count: 2)
        let start = ContinuousClock.now
        scheduler.schedule(.work({ order.withLock { $0.append(2) }; done.signal() }, barrier: false),
                           on: queue, at: start + .milliseconds(2), now: start)
        scheduler.schedule(.work({ order.withLock { $0.append(1) }; done.signal() }, barrier: false),
                           on: queue, at: start + .milliseconds(1), now: start)
        #expect(scheduler.pendingCount == 2, "nothing due yet")
        #expect(waitUntil { ContinuousClock.now >= start + .milliseconds(2) })
        let now = ContinuousClock.now
        scheduler.schedule(.work({ Issue.record("ran an hour early") }, barrier: false),
                           on: queue, at: now + .seconds(3_600), now: now)
        #expect(done.wait(timeout: .seconds(300)))
        #expect(order.withLock { $0 } == [1, 2], "in deadline order")
        #expect(scheduler.pendingCount == 1, "the hour-long one waits; the service's timer never fired")
    }
}
