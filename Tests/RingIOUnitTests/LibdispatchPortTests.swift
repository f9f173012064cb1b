import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIOQueue
@testable import RingIOBase

/// The checks of a few of libdispatch's own tests (swift-corelibs-libdispatch,
/// tests/), written again for RingIO's queues with shorter delays.
@Suite("libdispatch's tests, on IOQueue")
struct LibdispatchPortTests {
    @Test("dispatch_after: chained afters of 600, 200 and 0 ms, each within its window")
    func after() {
        let clock = ContinuousClock()
        let queue = IOQueue(label: "after")
        let windows = Locked<[(Duration, Duration)]>([])
        let done = Latch()
        // Each after arms the next from its own item, as the C test does.
        @Sendable func step(_ delays: ArraySlice<Int>) {
            guard let ms = delays.first else { return done.signal() }
            let armed = clock.now
            queue.asyncAfter(deadline: armed + .milliseconds(ms)) {
                windows.withLock { $0.append((clock.now - armed, .milliseconds(ms))) }
                step(delays.dropFirst())
            }
        }
        queue.async { step([600, 200, 0]) }
        #expect(done.wait())
        let measured = windows.withLock { $0 }
        #expect(measured.count == 3)
        for (elapsed, delay) in measured {
            #expect(elapsed >= delay, "never early")
            // The C test allows 0.5 s late; a loaded 2-core machine, 1 s.
            #expect(elapsed < delay + .seconds(1))
        }
    }

    @Test("dispatch_apply: 32 iterations, nested three deep, and with busy threads on every core")
    func apply() {
        let count = Atomic<Int>(0)
        IOQueue.concurrentPerform(iterations: 32) { _ in count.add(1, ordering: .relaxed) }
        #expect(count.load(ordering: .relaxed) == 32)
        count.store(0, ordering: .relaxed)
        IOQueue.concurrentPerform(iterations: 32) { _ in
            IOQueue.concurrentPerform(iterations: 32) { _ in
                IOQueue.concurrentPerform(iterations: 32) { _ in count.add(1, ordering: .relaxed) }
            }
        }
        #expect(count.load(ordering: .relaxed) == 32 * 32 * 32)
        // Contended: one busy loop per core on the global queue, then an apply.
        let cores = WorkerPool.shared.baseThreads
        let allDone = Atomic<Bool>(false)
        let busyStarted = Atomic<Int>(0)
        let busyFinished = Atomic<Int>(0)
        let group = IOGroup()
        for _ in 0..<cores {
            IOQueue.global.async(group: group) {
                busyStarted.add(1, ordering: .relaxed)
                while !allDone.load(ordering: .relaxed) {}
                busyFinished.add(1, ordering: .relaxed)
            }
        }
        #expect(waitUntil { busyStarted.load(ordering: .relaxed) == cores })
        count.store(0, ordering: .relaxed)
        IOQueue.concurrentPerform(iterations: 32) { _ in count.add(1, ordering: .relaxed) }
        #expect(count.load(ordering: .relaxed) == 32)
        #expect(busyFinished.load(ordering: .relaxed) == 0)
        allDone.store(true, ordering: .relaxed)
        #expect(group.wait(timeout: .seconds(10)))
    }

    @Test("dispatch_sema: a semaphore of 1 as a lock around 10,000 concurrentPerform increments")
    func semaphoreAsLock() {
        final class Total: @unchecked Sendable {
            // @unchecked: changed only between the semaphore's wait and signal.
            var value = 0
        }
        let total = Total()
        let semaphore = IOSemaphore(value: 1)
        IOQueue.concurrentPerform(iterations: 10_000) { _ in
            semaphore.wait()
            total.value += 1
            semaphore.signal()
        }
        #expect(total.value == 10_000)
    }

    @Test("dispatch_context_for_key: specifics of a queue and of its concurrent target, from items")
    func contextForKey() {
        let q = IOQueue(label: "q", target: IOQueue(label: "tq", kind: .concurrent, target: .global))
        let tq = q.target!
        let key1 = IOQueue.SpecificKey<String>(), key2 = IOQueue.SpecificKey<String>()
        let key4 = IOQueue.SpecificKey<String>()
        tq.setSpecific(key: key4, value: "ctxt for key 4")
        let group = IOGroup()
        q.async(group: group) { q.setSpecific(key: key1, value: "ctxt for key 1") }
        let fromGlobal = Locked<String?>(nil)
        IOQueue.global.async(group: group) {
            q.setSpecific(key: key2, value: "ctxt for key 2")
            IOQueue.global.async(group: group) { fromGlobal.withLock { $0 = q.getSpecific(key: key2) } }
        }
        let seen = Locked<[String?]>([])
        q.async(group: group) {
            seen.withLock {
                $0 = [IOQueue.getSpecific(key: key1), IOQueue.getSpecific(key: key4), q.getSpecific(key: key1),
                      q.getSpecific(key: key4)]
            }
        }
        q.async(group: group) { q.setSpecific(key: key1, value: "ctxt for key 1 bis") }
        #expect(group.wait(timeout: .seconds(10)))
        #expect(fromGlobal.withLock { $0 } == "ctxt for key 2")
        #expect(seen.withLock { $0 } == ["ctxt for key 1", "ctxt for key 4", "ctxt for key 1", nil])
        #expect(q.getSpecific(key: key1) == "ctxt for key 1 bis")
    }

    @Test("dispatch_group: 1,000 async items, a wait and a notify")
    func group() {
        let group = IOGroup()
        let count = Atomic<Int>(0)
        for _ in 0..<1_000 { IOQueue.global.async(group: group) { count.add(1, ordering: .relaxed) } }
        #expect(group.wait(timeout: .seconds(10)))
        #expect(count.load(ordering: .relaxed) == 1_000)
        let notified = Latch()
        group.notify(queue: .global) { notified.signal() }
        #expect(notified.wait())
    }

    @Test("dispatch_priority: under a flood on every priority, higher priorities finish more work first")
    func priority() {
        priorityFloods.withLock {
            let workers = WorkerPool.shared.baseThreads
            let perPriority = 30 * workers
            let finishedFirstHalf = Locked([Int](repeating: 0, count: 5))
            let finished = Atomic<Int>(0)
            let total = perPriority * 5
            let done = Latch(count: total)
            // Interleaved, as the C test's loops: submitting takes far less
            // than one item's 500 µs, so nearly all wait in the pool at once.
            for _ in 0..<perPriority {
                for priority in IOQueue.Priority.allCases {
                    IOQueue.global(priority: priority).async {
                        spin(microseconds: 500)
                        if finished.add(1, ordering: .relaxed).newValue <= total / 2 {
                            finishedFirstHalf.withLock { $0[priority.rawValue] += 1 }
                        }
                        done.signal()
                    }
                }
            }
            #expect(done.wait(timeout: .seconds(60)))
            let counts = finishedFirstHalf.withLock { $0 }
            // As the C test: the highest level got more done than the lowest.
            #expect(counts[4] > counts[0], "first half by priority, low to high: \(counts)")
            #expect(counts[0] > 0, ".background made progress: \(counts)")
        }
    }
}
