#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIOQueue
@testable import RingIOBase

/// The number of threads of this process (entries of /proc/self/task).
func threadCount() -> Int {
    guard let dir = opendir("/proc/self/task") else { return -1 }
    defer { closedir(dir) }
    var count = 0
    while let entry = readdir(dir) {
        let first = withUnsafeBytes(of: entry.pointee.d_name) { $0[0] }
        if first != UInt8(ascii: ".") { count += 1 }
    }
    return count
}

@Suite("IOQueue.asyncAfter and concurrentPerform")
struct QueueAfterApplyTests {
    @Test("asyncAfter never runs before its deadline, and items of one queue go in deadline order")
    func afterNeverEarlyInOrder() {
        let queue = IOQueue(label: "after")
        let clock = ContinuousClock()
        // The first asyncAfter of the process starts its scheduler and
        // timer thread: warm up, then give the arming a base that outlasts
        // it. Under ThreadSanitizer at load 30 the ten calls took over
        // 300 ms once; every call that finds its deadline past queues its
        // item at once, in call order, and the test saw that order.
        let warm = Latch()
        queue.asyncAfter(deadline: clock.now + .milliseconds(1)) { warm.signal() }
        #expect(warm.wait(timeout: .seconds(300)))
        let start = clock.now + .milliseconds(500)
        let log = Locked<[(Int, ContinuousClock.Instant)]>([])
        let done = Latch(count: 10)
        for i in [7, 3, 9, 1, 5, 2, 8, 4, 10, 6] {
            queue.asyncAfter(deadline: start + .milliseconds(3 * i)) {
                log.withLock { $0.append((i, clock.now)) }
                done.signal()
            }
        }
        #expect(done.wait())
        let entries = log.withLock { $0 }
        #expect(entries.map(\.0) == Array(1...10))
        for (i, at) in entries { #expect(at >= start + .milliseconds(3 * i)) }
    }

    @Test("a deadline already past keeps its FIFO place before later async work")
    func pastDeadlineKeepsFIFOPlace() {
        let queue = IOQueue(label: "past")
        queue.suspend()
        let order = Locked<[Int]>([])
        let done = Latch(count: 3)
        queue.async { order.withLock { $0.append(1) }; done.signal() }
        queue.asyncAfter(deadline: .now - .seconds(1)) { order.withLock { $0.append(2) }; done.signal() }
        queue.async { order.withLock { $0.append(3) }; done.signal() }
        queue.resume()
        #expect(done.wait())
        #expect(order.withLock { $0 } == [1, 2, 3])
    }

    @Test("10,000 pending asyncAfters cost no thread each")
    func pendingAftersNoThreads() {
        let queue = IOQueue(label: "many")
        // Warm up: the timer thread and the pool exist.
        let warm = Latch()
        queue.asyncAfter(deadline: .now + .milliseconds(1)) { warm.signal() }
        #expect(warm.wait())
        let threadsBefore = threadCount()
        let done = Latch(count: 10_000)
        let deadline = ContinuousClock.now + .milliseconds(300)
        for i in 0..<10_000 {
            queue.asyncAfter(deadline: deadline + .microseconds(i % 100)) { done.signal() }
        }
        let threadsPending = threadCount()
        // The count is the whole process's: tests running beside this one
        // start and end threads meanwhile (5 more once under ASan). A thread
        // per pending item would add 10,000.
        #expect(threadsPending - threadsBefore < 100, "\(threadsBefore) threads before, \(threadsPending) with 10,000 pending")
        #expect(done.wait(timeout: .seconds(20)))
    }

    @Test("a work item cancelled before its deadline does not run and still finishes")
    func afterCancelledItem() {
        let ran = Atomic<Bool>(false)
        let item = IOWorkItem { ran.store(true, ordering: .relaxed) }
        IOQueue(label: "q").asyncAfter(deadline: .now + .milliseconds(20), execute: item)
        item.cancel()
        #expect(item.wait(timeout: .seconds(5)))
        #expect(ran.load(ordering: .relaxed) == false)
    }

    @Test("concurrentPerform runs every index once; 0 iterations returns at once")
    func everyIndexOnce() {
        for iterations in [0, 1, 2, 3, 7, 64, 1_000, 100_003] {
            let hits = Locked([Int](repeating: 0, count: Swift.max(iterations, 0)))
            IOQueue.concurrentPerform(iterations: iterations) { i in hits.withLock { $0[i] += 1 } }
            #expect(hits.withLock { $0.allSatisfy { $0 == 1 } }, "\(iterations) iterations")
        }
        IOQueue.concurrentPerform(iterations: -5) { _ in Issue.record("ran with a negative count") }
    }

    @Test("concurrentPerform uses the calling thread and other threads")
    func usesCallerAndWorkers() {
        let me = Syscall.gettid()
        let threads = Locked<Set<pid_t>>([])
        IOQueue.concurrentPerform(iterations: 64) { _ in
            threads.withLock { _ = $0.insert(Syscall.gettid()) }
            spin(microseconds: 500)
        }
        let seen = threads.withLock { $0 }
        #expect(seen.contains(me))
        #expect(seen.count >= 2)
    }

    @Test("nested concurrentPerform from every worker finishes (no deadlock)")
    func nested() {
        let count = Atomic<Int>(0)
        let done = Latch()
        spawnThread(name: "nest") {
            IOQueue.concurrentPerform(iterations: 16) { _ in
                IOQueue.concurrentPerform(iterations: 16) { _ in
                    IOQueue.concurrentPerform(iterations: 16) { _ in count.add(1, ordering: .relaxed) }
                }
            }
            done.signal()
        }
        #expect(done.wait(timeout: .seconds(30)))
        #expect(count.load(ordering: .relaxed) == 16 * 16 * 16)
    }

    @Test("concurrentPerform from a serial queue's item and with every worker blocked still finishes")
    func whileWorkersBlocked() {
        let release = Latch()
        let blocked = Latch(count: WorkerPool.shared.baseThreads)
        let wide = IOQueue(label: "blockers", kind: .concurrent)
        for _ in 0..<WorkerPool.shared.baseThreads {
            wide.async {
                blocked.signal()
                _ = release.wait(timeout: .seconds(30))
            }
        }
        #expect(blocked.wait())
        let count = Atomic<Int>(0)
        let serial = IOQueue(label: "caller")
        serial.sync {
            IOQueue.concurrentPerform(iterations: 1_000) { _ in count.add(1, ordering: .relaxed) }
        }
        release.signal()
        #expect(count.load(ordering: .relaxed) == 1_000)
    }
}
