#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOQueue
@testable import RingIOBase

@Suite("IOQueue")
struct QueueTests {
    @Test("100,000 items from 4 producers run on a serial queue in per-producer order, never overlapping")
    func serialOrderAndExclusion() {
        let queue = IOQueue(label: "serial")
        let producers = 4, perProducer = 25_000
        // Touched only by the queue's items: a data race here would be the bug under test.
        final class State: @unchecked Sendable {
            // @unchecked: accessed only from items of one serial queue (what the test checks).
            var last = [Int](repeating: -1, count: 4)
            var outOfOrder = 0
            var ran = 0
        }
        let state = State()
        let inside = Atomic<Int>(0)
        let overlaps = Atomic<Int>(0)
        let done = Latch(count: producers * perProducer)
        let started = Latch(count: producers)
        for p in 0..<producers {
            spawnThread(name: "producer") {
                for i in 0..<perProducer {
                    queue.async {
                        if inside.add(1, ordering: .acquiringAndReleasing).newValue != 1 {
                            overlaps.add(1, ordering: .relaxed)
                        }
                        if state.last[p] != i - 1 { state.outOfOrder += 1 }
                        state.last[p] = i
                        state.ran += 1
                        inside.subtract(1, ordering: .acquiringAndReleasing)
                        done.signal()
                    }
                }
                started.signal()
            }
        }
        #expect(started.wait(timeout: .seconds(60)))
        #expect(done.wait(timeout: .seconds(60)))
        queue.sync {
            #expect(state.ran == producers * perProducer)
            #expect(state.outOfOrder == 0)
        }
        let overlapCount = overlaps.load(ordering: .relaxed)
        #expect(overlapCount == 0)
    }

    @Test("a concurrent queue runs items in parallel")
    func concurrentOverlap() {
        let queue = IOQueue(label: "concurrent", kind: .concurrent)
        let inside = Atomic<Int>(0)
        let maxInside = Atomic<Int>(0)
        let done = Latch(count: 4)
        for _ in 0..<4 {
            queue.async {
                let now = inside.add(1, ordering: .acquiringAndReleasing).newValue
                _ = maxInside.max(now, ordering: .relaxed)
                // Hold the item until a second one has joined, or time out.
                let deadline = monotonicNanoseconds() + 2_000_000_000
                while maxInside.load(ordering: .relaxed) < 2 && monotonicNanoseconds() < deadline { usleep(100) }
                inside.subtract(1, ordering: .acquiringAndReleasing)
                done.signal()
            }
        }
        #expect(done.wait())
        let most = maxInside.load(ordering: .relaxed)
        #expect(most >= 2)
    }

    @Test("asyncBarrier runs alone, after every earlier item and before every later one")
    func barrierOrdering() {
        let queue = IOQueue(label: "barrier", kind: .concurrent)
        let log = Locked<[String]>([])
        let inside = Atomic<Int>(0)
        let barrierSawOthers = Atomic<Bool>(false)
        let done = Latch(count: 21)
        for i in 0..<10 {
            queue.async {
                inside.add(1, ordering: .acquiringAndReleasing)
                usleep(UInt32(1000 * (i % 3)))
                log.withLock { $0.append("a") }
                inside.subtract(1, ordering: .acquiringAndReleasing)
                done.signal()
            }
        }
        queue.asyncBarrier {
            if inside.load(ordering: .acquiring) != 0 { barrierSawOthers.store(true, ordering: .relaxed) }
            usleep(5000)
            if inside.load(ordering: .acquiring) != 0 { barrierSawOthers.store(true, ordering: .relaxed) }
            log.withLock { $0.append("B") }
            done.signal()
        }
        for _ in 0..<10 {
            queue.async {
                log.withLock { $0.append("c") }
                done.signal()
            }
        }
        #expect(done.wait())
        let entries = log.withLock { $0 }
        #expect(entries.count == 21)
        #expect(Array(entries.prefix(10)) == Array(repeating: "a", count: 10))
        #expect(entries[10] == "B")
        #expect(Array(entries.suffix(10)) == Array(repeating: "c", count: 10))
        let sawOthers = barrierSawOthers.load(ordering: .relaxed)
        #expect(!sawOthers)
    }

    @Test("suspend and resume are counted", arguments: [IOQueue.Kind.serial, .concurrent])
    func suspendResume(kind: IOQueue.Kind) {
        let queue = IOQueue(label: "suspend", kind: kind)
        let ran = Atomic<Int>(0)
        let latch = Latch()
        queue.suspend()
        queue.suspend()
        queue.async {
            ran.add(1, ordering: .relaxed)
            latch.signal()
        }
        #expect(!latch.wait(timeout: .milliseconds(50)))
        queue.resume()
        #expect(!latch.wait(timeout: .milliseconds(50)), "one resume of two suspends must not start work")
        let ranBefore = ran.load(ordering: .relaxed)
        #expect(ranBefore == 0)
        queue.resume()
        #expect(latch.wait())
        let ranAfter = ran.load(ordering: .relaxed)
        #expect(ranAfter == 1)
    }

    @Test("suspend does not stop the item that is running; it stops the next")
    func suspendBetweenItems() {
        let queue = IOQueue(label: "suspend-between")
        let order = Locked<[Int]>([])
        let first = Latch(), second = Latch()
        queue.async {
            queue.suspend()
            order.withLock { $0.append(1) }
            first.signal()
        }
        queue.async {
            order.withLock { $0.append(2) }
            second.signal()
        }
        #expect(first.wait())
        #expect(!second.wait(timeout: .milliseconds(50)))
        queue.resume()
        #expect(second.wait())
        #expect(order.withLock { $0 } == [1, 2])
    }

    @Test("sync runs after earlier items and returns the value", arguments: [IOQueue.Kind.serial, .concurrent])
    func syncOrdering(kind: IOQueue.Kind) throws {
        let queue = IOQueue(label: "sync", kind: kind)
        let value = Locked(0)
        let gate = Latch()
        queue.async {
            _ = gate.wait()
            value.withLock { $0 = 41 }
        }
        spawnThread(name: "opener") {
            usleep(20_000)
            gate.signal()
        }
        if kind == .serial {
            let result = queue.sync { value.withLock { $0 + 1 } }
            #expect(result == 42)
        } else {
            // A concurrent queue does not order sync after running items; a barrier does.
            queue.asyncBarrier {}
            let result = queue.sync { 1 }
            #expect(result == 1)
        }
        struct Failure: Error {}
        #expect(throws: Failure.self) { try queue.sync { throw Failure() } }
        // The queue still works after a throwing sync.
        #expect(queue.sync { 7 } == 7)
    }

    @Test("sync from a work item onto another serial queue, and isCurrent")
    func nestedSync() {
        let a = IOQueue(label: "a"), b = IOQueue(label: "b")
        let latch = Latch()
        let result = Locked<[Bool]>([])
        a.async {
            let inner = b.sync { [a.isCurrent, b.isCurrent] }
            result.withLock { $0 = inner + [a.isCurrent, b.isCurrent] }
            latch.signal()
        }
        #expect(latch.wait())
        #expect(result.withLock { $0 } == [true, true, true, false])
        #expect(!a.isCurrent)
    }

    @Test("a blocked work item does not starve other queues", arguments: [false, true])
    func blockedItemsDoNotStarve(rightAfterOtherWork: Bool) {
        if rightAfterOtherWork {
            // A worker is then polling for work (spinning) when the blockers
            // arrive: the case where the watchdog once missed the stall.
            let warm = Latch()
            IOQueue.global.async { warm.signal() }
            _ = warm.wait()
        } else {
            usleep(100_000)
        }
        let blockers = IOQueue(label: "blockers", kind: .concurrent)
        let release = Latch()
        let blocking = WorkerPool.shared.baseThreads + 2
        for _ in 0..<blocking {
            blockers.async { _ = release.wait(timeout: .seconds(30)) }
        }
        let other = IOQueue(label: "other")
        let ran = Latch()
        other.async { ran.signal() }
        #expect(ran.wait(timeout: .seconds(5)), "work on another queue must run while every base worker is blocked")
        release.signal()
    }

    @Test("the global queue is concurrent and runs work")
    func globalQueue() {
        #expect(IOQueue.global.kind == .concurrent)
        let latch = Latch()
        IOQueue.global.async { latch.signal() }
        #expect(latch.wait())
    }
}

@Suite("IOGroup")
struct GroupTests {
    @Test("wait(timeout:) is false on timeout and true after leave")
    func waitTimeout() {
        let group = IOGroup()
        group.enter()
        let start = monotonicNanoseconds()
        #expect(group.wait(timeout: .milliseconds(50)) == false)
        #expect(monotonicNanoseconds() - start >= 45_000_000)
        IOQueue.global.async { group.leave() }
        #expect(group.wait(timeout: .seconds(10)) == true)
        group.wait()
    }

    @Test("notify runs once, when the group empties, on its queue")
    func notifyOnce() {
        let group = IOGroup()
        let queue = IOQueue(label: "notify")
        let runs = Atomic<Int>(0)
        let onQueue = Atomic<Bool>(false)
        let latch = Latch()
        group.enter()
        group.enter()
        group.notify(queue: queue) {
            runs.add(1, ordering: .relaxed)
            onQueue.store(queue.isCurrent, ordering: .relaxed)
            latch.signal()
        }
        group.leave()
        #expect(!latch.wait(timeout: .milliseconds(30)))
        group.leave()
        #expect(latch.wait())
        group.enter()
        group.leave()
        usleep(20_000)
        let runCount = runs.load(ordering: .relaxed)
        #expect(runCount == 1)
        let ranOnQueue = onQueue.load(ordering: .relaxed)
        #expect(ranOnQueue)
    }

    @Test("notify on an empty group runs at once")
    func notifyEmpty() {
        let group = IOGroup()
        let latch = Latch()
        group.notify(queue: .global) { latch.signal() }
        #expect(latch.wait())
    }
}

/// An actor whose executor is a serial IOQueue.
actor QueueBoundCounter {
    let queue: IOQueue
    var count = 0
    init(queue: IOQueue) { self.queue = queue }
    nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }

    func increment() -> Bool {
        count += 1
        return queue.isCurrent
    }

    /// Called from a work item already running on `queue`: no hop needed.
    nonisolated func incrementFromQueue() {
        assumeIsolated { $0.count += 1 }
    }
}

@Suite("IOQueue as an executor")
struct ExecutorTests {
    @Test("an actor whose executor is a serial IOQueue runs its methods there")
    func actorOnQueue() async {
        let queue = IOQueue(label: "actor")
        let counter = QueueBoundCounter(queue: queue)
        var allOnQueue = true
        for _ in 0..<100 { allOnQueue = await counter.increment() && allOnQueue }
        #expect(allOnQueue)
        #expect(await counter.count == 100)
        // A handler delivered on the actor's queue touches its state directly.
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            queue.async {
                counter.incrementFromQueue()
                c.resume()
            }
        }
        #expect(await counter.count == 101)
    }

    @Test("a task preferring an IOQueue runs there")
    func taskExecutorPreference() async {
        let queue = IOQueue(label: "task-executor", kind: .concurrent)
        let onQueue = await Task(executorPreference: queue) { queue.isCurrent }.value
        #expect(onQueue)
    }
}
