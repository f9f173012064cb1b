#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOEngine
@testable import RingIOSources

/// Timer and user-data sources, on both backends (checks after libdispatch's
/// tests/dispatch_timer*.c, dispatch_drift.c and dispatch_timer_set_time.c,
/// written anew).
@Suite struct SourceTimerTests {
    @Test(arguments: allBackends)
    func oneShotFiresOnceNeverEarly(_ backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let log = SourceLog()
        let timer = IOTimerSource(queue: IOQueue(label: "t"), engine: engine)
        let deadline = ContinuousClock.now + .milliseconds(20)
        timer.schedule(deadline: deadline)
        log.attach(timer)
        timer.activate()
        #expect(waitUntil(timeout: .seconds(5)) { log.count == 1 })
        milliseconds(60)
        #expect(log.deliveries.withLock { $0 } == [1])
        #expect(log.times.withLock { $0[0] } >= deadline)
        #expect(log.registrations.load(ordering: .relaxed) == 1)
        timer.cancel()
        #expect(log.cancelled.wait())
        #expect(log.cancels.load(ordering: .relaxed) == 1)
    }

    @Test(arguments: allBackends)
    func repeatingTimerDoesNotDrift(_ backend: IOEngine.Backend) throws {
        // dispatch_drift.c: fire n is due at start + n × interval; lateness
        // does not add up, and no fire is early.
        let engine = try makeEngine(backend)
        let log = SourceLog()
        let timer = IOTimerSource(queue: IOQueue(label: "t"), engine: engine)
        let interval = Duration.milliseconds(5)
        let start = ContinuousClock.now + interval
        timer.schedule(deadline: start, repeating: interval)
        log.attach(timer)
        timer.activate()
        #expect(waitUntil(timeout: .seconds(10)) { log.total >= 60 })
        timer.cancel()
        #expect(log.cancelled.wait())
        let (deliveries, times) = (log.deliveries.withLock { $0 }, log.times.withLock { $0 })
        var fired: UInt = 0
        for (data, time) in zip(deliveries, times) {
            fired += data
            // The delivery carries fires 0..<fired: the last is due at start + (fired-1) × interval.
            #expect(time >= start + interval * Int(fired - 1), "delivery \(fired) early")
        }
        // No drift: after 60+ fires, the count matches the clock (± a few fires of lateness).
        let expected = Int((times.last! - start) / interval) + 1
        #expect(abs(Int(fired) - expected) <= 2, "fired \(fired), clock says \(expected)")
        #expect(log.overlapping.load(ordering: .relaxed) == 0)
    }

    @Test(arguments: allBackends)
    func suspendedTimerMergesFires(_ backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let log = SourceLog()
        let timer = IOTimerSource(queue: IOQueue(label: "t"), engine: engine)
        log.attach(timer)
        timer.schedule(deadline: .now, repeating: .milliseconds(2))
        timer.activate()
        #expect(waitUntil { log.count >= 1 })
        timer.suspend()
        // A delivery already on its way to the queue when `suspend` came
        // may still run (one at most: a source has one delivery pending);
        // none after it. (A fixed 5 ms wait for it failed at load 20.)
        let atSuspend = log.count
        milliseconds(50)
        let before = log.total
        #expect(log.count <= atSuspend + 1, "a suspended timer delivered more than the one under way")
        milliseconds(50)
        #expect(log.total == before, "a suspended timer delivered")
        timer.resume()
        #expect(waitUntil { log.total >= before + 20 })
        // The fires of the suspension came as one delivery.
        #expect(log.deliveries.withLock { $0.max()! } >= 15)
        timer.cancel()
        #expect(log.cancelled.wait())
    }

    @Test(arguments: allBackends)
    func rescheduleFromHandlerAndCancelFromHandler(_ backend: IOEngine.Backend) throws {
        // dispatch_timer_set_time.c: the handler moves the timer; the last
        // handler cancels its own source, and nothing runs after.
        let engine = try makeEngine(backend)
        let log = SourceLog()
        let timer = IOTimerSource(queue: IOQueue(label: "t", kind: .concurrent), engine: engine)
        let rounds = Atomic<Int>(0)
        log.attach(timer) { _ in
            if rounds.add(1, ordering: .relaxed).newValue == 5 {
                timer.cancel()
            } else {
                timer.schedule(deadline: .now + .milliseconds(3))
            }
        }
        timer.schedule(deadline: .now + .milliseconds(3), repeating: .milliseconds(1))
        timer.activate()
        #expect(log.cancelled.wait())
        milliseconds(20)
        #expect(log.count == 5)
        // The first delivery may merge several fires of the 1 ms repeating
        // timer (a loaded machine runs the handler late: data is the fires
        // since the last delivery); every rescheduled one-shot fires once.
        #expect(log.deliveries.withLock { $0.dropFirst().allSatisfy { $0 == 1 } && $0.first! >= 1 })
        #expect(log.cancels.load(ordering: .relaxed) == 1)
    }

    @Test(arguments: allBackends)
    func neverScheduledNeverFires(_ backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let log = SourceLog()
        let timer = IOTimerSource(queue: IOQueue(label: "t"), engine: engine)
        log.attach(timer)
        timer.activate()
        // The registration handler runs on the queue: on a loaded machine
        // it can take longer than the 30 ms below (it once did).
        #expect(waitUntil(timeout: .seconds(300)) { log.registrations.load(ordering: .relaxed) == 1 })
        milliseconds(30)
        #expect(log.count == 0)
        // Scheduled after activation: it fires.
        timer.schedule(deadline: .now + .milliseconds(1))
        #expect(waitUntil { log.count == 1 })
        timer.cancel()
        #expect(log.cancelled.wait())
    }

    @Test(arguments: allBackends)
    func manyTimersAllFire(_ backend: IOEngine.Backend) throws {
        // 10,000 armed timers, one ring timeout: each fires once.
        let engine = try makeEngine(backend)
        let fired = Atomic<Int>(0)
        let now = ContinuousClock.now
        var tokens: [TimerToken] = []
        for i in 0..<10_000 {
            tokens.append(engine.timers.arm(deadline: now + .microseconds(i * 7 % 20_000), leeway: .zero) {
                fired.add(1, ordering: .relaxed)
            })
        }
        // Cancel every tenth: those never fire.
        var cancelled = 0
        for (i, t) in tokens.enumerated() where i % 10 == 0 {
            if engine.timers.cancel(t) { cancelled += 1 }
        }
        #expect(waitUntil(timeout: .seconds(10)) { fired.load(ordering: .relaxed) == 10_000 - cancelled })
        milliseconds(30)
        #expect(fired.load(ordering: .relaxed) == 10_000 - cancelled)
        #expect(engine.timers.count == 0)
    }
}

@Suite struct SourceUserDataTests {
    @Test(arguments: allBackends)
    func mergesWhileHandlerRuns(_ backend: IOEngine.Backend) throws {
        _ = try makeEngine(backend)
        for merge in [IOUserDataSource.Merge.add, .or, .replace] {
            let log = SourceLog()
            let source = IOUserDataSource(merge: merge, queue: IOQueue(label: "u"))
            let gate = Latch()
            // A bound on a hang only (the handler must still be running
            // when the test looks, on a loaded machine under a sanitizer).
            log.attach(source) { _ in _ = gate.wait(timeout: .seconds(300)) }
            source.activate()
            source.merge(1)
            #expect(waitUntil { log.running.load(ordering: .relaxed) == 1 })
            source.merge(2)
            source.merge(0)
            source.merge(4)
            gate.signal()
            #expect(waitUntil { log.count == 2 })
            let second = log.deliveries.withLock { $0[1] }
            switch merge {
            case .add: #expect(second == 6)
            case .or: #expect(second == 6)
            case .replace: #expect(second == 4)
            }
            source.cancel()
            #expect(log.cancelled.wait())
        }
    }

    @Test func inactiveSourceCancelRunsCancelHandler() {
        let log = SourceLog()
        let source = IOUserDataSource(merge: .add, queue: IOQueue(label: "u"))
        log.attach(source)
        source.merge(3)
        source.cancel()
        #expect(log.cancelled.wait())
        #expect(log.count == 0)
        #expect(log.registrations.load(ordering: .relaxed) == 0)
    }

    @Test func firstResumeActivates() {
        let log = SourceLog()
        let source = IOUserDataSource(merge: .add, queue: IOQueue(label: "u"))
        log.attach(source)
        source.merge(3)
        source.resume()
        #expect(waitUntil { log.count == 1 })
        #expect(log.total == 3)
        source.cancel()
        #expect(log.cancelled.wait())
    }

    @Test func eventsSequenceMergesWhileConsumerIsBehindAndEndsAtCancel() async {
        let source = IOUserDataSource(merge: .add, queue: IOQueue(label: "u"))
        let events = source.events()
        source.activate()
        source.merge(1)
        var iterator = events.makeAsyncIterator()
        #expect(await iterator.next() == 1)
        source.merge(2)
        source.merge(3)
        #expect(await iterator.next() == 5)
        source.cancel()
        #expect(await iterator.next() == nil)
    }

    @Test(arguments: allBackends)
    func hundredThousandSourcesCreatedAndCancelled(_ backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let queue = IOQueue(label: "u")
        let cancels = Atomic<Int>(0)
        for i in 0..<100_000 {
            let source: IOSource = i % 2 == 0 ? IOUserDataSource(merge: .add, queue: queue)
                                              : IOTimerSource(queue: queue, engine: engine)
            source.setCancelHandler { cancels.add(1, ordering: .relaxed) }
            if let t = source as? IOTimerSource { t.schedule(deadline: .now + .seconds(60)) }
            source.activate()
            source.cancel()
        }
        #expect(waitUntil(timeout: .seconds(30)) { cancels.load(ordering: .relaxed) == 100_000 })
        #expect(engine.timers.count == 0)
    }

    /// The engine's timer holds its source strongly while armed: once
    /// cancelled (a repeating timer that fired, one armed far ahead), the
    /// source is released.
    @Test(arguments: allBackends)
    func cancelledTimersAreReleased(_ backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        weak var fired: IOTimerSource?
        weak var ahead: IOTimerSource?
        do {
            let log = SourceLog(), aheadLog = SourceLog()
            let a = IOTimerSource(queue: IOQueue(label: "t"), engine: engine)
            let b = IOTimerSource(queue: IOQueue(label: "t2"), engine: engine)
            fired = a
            ahead = b
            a.schedule(deadline: .now, repeating: .milliseconds(1))
            b.schedule(deadline: .now + .seconds(3600))
            log.attach(a)
            aheadLog.attach(b)
            a.activate()
            b.activate()
            #expect(waitUntil { log.count >= 2 })
            a.cancel()
            b.cancel()
            #expect(log.cancelled.wait())
            #expect(aheadLog.cancelled.wait())
        }
        #expect(waitUntil { fired == nil && ahead == nil })
        #expect(engine.timers.count == 0)
    }
}
