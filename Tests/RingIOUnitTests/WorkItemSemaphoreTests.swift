import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIOQueue
@testable import RingIOBase

@Suite("IOWorkItem and IOSemaphore")
struct WorkItemSemaphoreTests {
    @Test("a work item runs once; wait, async wait and notify follow it")
    func workItemRuns() async {
        let count = Atomic<Int>(0)
        let item = IOWorkItem { count.add(1, ordering: .relaxed) }
        let notified = Latch()
        item.notify(queue: IOQueue(label: "n")) { notified.signal() }
        #expect(!item.wait(timeout: .milliseconds(10)), "never submitted: not finished")
        IOQueue.global.async(execute: item)
        blockingWait(item)
        await item.wait()
        #expect(notified.wait())
        #expect(count.load(ordering: .relaxed) == 1)
        let late = Latch()
        item.notify(queue: .global) { late.signal() }
        #expect(late.wait(), "notify after the end runs at once")
    }

    @Test("cancel before start: the work never runs, the item still finishes")
    func cancelBeforeStart() {
        let queue = IOQueue(label: "q")
        queue.suspend()
        let ran = Atomic<Bool>(false)
        let item = IOWorkItem { ran.store(true, ordering: .relaxed) }
        queue.async(execute: item)
        item.cancel()
        #expect(item.isCancelled)
        let notified = Latch()
        item.notify(queue: .global) { notified.signal() }
        queue.resume()
        #expect(item.wait(timeout: .seconds(5)))
        #expect(notified.wait())
        #expect(ran.load(ordering: .relaxed) == false)
    }

    @Test("cancelling a running item does not interrupt it; perform runs on the caller")
    func cancelRunningAndPerform() {
        let started = Latch()
        let finished = Atomic<Bool>(false)
        let item = IOWorkItem {
            started.signal()
            milliseconds(20)
            finished.store(true, ordering: .relaxed)
        }
        IOQueue.global.async(execute: item)
        #expect(started.wait())
        item.cancel()
        item.wait()
        #expect(finished.load(ordering: .relaxed) == true)
        let me = Syscall.gettid()
        let ranOn = Atomic<Int32>(0)
        IOWorkItem { ranOn.store(Syscall.gettid(), ordering: .relaxed) }.perform()
        #expect(ranOn.load(ordering: .relaxed) == me)
    }

    @Test("a barrier item on a concurrent queue runs alone")
    func barrierItem() {
        let queue = IOQueue(label: "wide", kind: .concurrent)
        let running = Atomic<Int>(0)
        let overlap = Atomic<Bool>(false)
        let done = Latch(count: 21)
        for i in 0..<21 {
            if i == 10 {
                queue.async(execute: IOWorkItem(barrier: true) {
                    if running.add(1, ordering: .relaxed).newValue != 1 { overlap.store(true, ordering: .relaxed) }
                    spin(microseconds: 5_000)
                    running.subtract(1, ordering: .relaxed)
                    done.signal()
                })
            } else {
                queue.async {
                    running.add(1, ordering: .relaxed)
                    spin(microseconds: 1_000)
                    running.subtract(1, ordering: .relaxed)
                    done.signal()
                }
            }
        }
        #expect(done.wait())
        #expect(overlap.load(ordering: .relaxed) == false)
    }

    @Test("signal says whether it woke a waiter; a timed-out wait takes nothing")
    func signalAndTimeout() {
        let semaphore = IOSemaphore(value: 0)
        #expect(!semaphore.wait(timeout: .milliseconds(10)))
        #expect(!semaphore.signal(), "nobody waits: the value rises")
        #expect(semaphore.wait(timeout: .zero))
        #expect(!semaphore.wait(timeout: .zero), "the timed-out waits left no count behind")
        let woke = Latch()
        spawnThread(name: "waiter") {
            semaphore.wait()
            woke.signal()
        }
        #expect(waitUntil { semaphore.waiterCount == 1 })
        #expect(semaphore.signal(), "the thread waits: signal wakes it")
        #expect(woke.wait())
    }

    @Test("two threads ping-pong: every count is handed over, in turn")
    func threadPingPong() {
        let ping = IOSemaphore(value: 0), pong = IOSemaphore(value: 0)
        let rounds = 2_000
        // Written by one side before its signal, read by the other after its
        // wait: the semaphore is the only ordering (ThreadSanitizer checks it).
        nonisolated(unsafe) var turn = 0
        let done = Latch()
        spawnThread(name: "pong") {
            for i in 0..<rounds {
                ping.wait()
                if turn != 2 * i + 1 { break }
                turn += 1
                pong.signal()
            }
            done.signal()
        }
        for i in 0..<rounds {
            turn += 1
            ping.signal()
            pong.wait()
            #expect(turn == 2 * i + 2)
            if turn != 2 * i + 2 { break }
        }
        #expect(done.wait(timeout: .seconds(300)))
        #expect(ping.waiterCount == 0 && pong.waiterCount == 0)
    }

    @Test("two tasks ping-pong: every count is handed over, in turn")
    func taskPingPong() async {
        let ping = IOSemaphore(value: 0), pong = IOSemaphore(value: 0)
        let rounds = 20_000
        // An atomic, not a plain variable as in the threads' test: a task
        // resumed by `signal` is ordered after it inside libswift_Concurrency,
        // which is not built for ThreadSanitizer (it would report a race).
        let turn = Atomic<Int>(0)
        let other = Task {
            var inTurn = true
            for i in 0..<rounds {
                try? await ping.wait()
                if turn.load(ordering: .relaxed) != 2 * i + 1 { inTurn = false }
                turn.store(2 * i + 2, ordering: .relaxed)
                pong.signal()
            }
            return inTurn
        }
        var inTurn = true
        for i in 0..<rounds {
            turn.store(2 * i + 1, ordering: .relaxed)
            ping.signal()
            try? await pong.wait()
            if turn.load(ordering: .relaxed) != 2 * i + 2 { inTurn = false }
        }
        #expect(inTurn)
        #expect(await other.value)
        #expect(ping.waiterCount == 0 && pong.waiterCount == 0)
    }

    @Test("timed waits racing signals: a count is taken exactly when a wait says so")
    func timedWaitsRaceSignals() {
        let semaphore = IOSemaphore(value: 0)
        let signals = 3_000, waiters = 3
        let taken = Atomic<Int>(0), handed = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)
        let finished = Latch(count: waiters)
        for w in 0..<waiters {
            spawnThread(name: "timed-\(w)") {
                var timeout = 1
                while !stop.load(ordering: .acquiring) {
                    // Timeouts of 1–64 µs: many end right as a signal comes.
                    if semaphore.wait(timeout: .microseconds(timeout)) { taken.add(1, ordering: .relaxed) }
                    timeout = timeout % 64 + 7
                }
                finished.signal()
            }
        }
        for i in 0..<signals {
            if semaphore.signal() { handed.add(1, ordering: .relaxed) }
            if i % 16 == 0 { sleepNanoseconds(20_000) }
        }
        #expect(waitUntil(timeout: .seconds(300)) { taken.load(ordering: .relaxed) >= handed.load(ordering: .relaxed) })
        stop.store(true, ordering: .releasing)
        #expect(finished.wait(timeout: .seconds(300)))
        var left = 0
        while semaphore.wait(timeout: .zero) { left += 1 }
        #expect(taken.load(ordering: .relaxed) + left == signals,
                "taken \(taken.load(ordering: .relaxed)) + left \(left) must be the \(signals) signals")
        #expect(semaphore.waiterCount == 0)
    }

    @Test("one thread's waits move between semaphores: each takes exactly its own counts")
    func waitsMoveBetweenSemaphores() {
        // A thread reuses one waiter (and futex word) for all its blocking
        // waits: a wait on one semaphore must not take, or lose, a count of
        // another because a signaller of the last one still wakes the word.
        let semaphores = [IOSemaphore(value: 0), IOSemaphore(value: 0)]
        let signals = 2_000
        let taken0 = Atomic<Int>(0), taken1 = Atomic<Int>(0)
        func taken(_ s: Int) -> Int { s == 0 ? taken0.load(ordering: .relaxed) : taken1.load(ordering: .relaxed) }
        let stop = Atomic<Bool>(false)
        let finished = Latch(count: 3)
        spawnThread(name: "mover") {
            var timeout = 1, which = 0
            while !stop.load(ordering: .acquiring) {
                if semaphores[which].wait(timeout: .microseconds(timeout)) {
                    if which == 0 { taken0.add(1, ordering: .relaxed) } else { taken1.add(1, ordering: .relaxed) }
                }
                which = 1 - which
                timeout = timeout % 50 + 3
            }
            finished.signal()
        }
        for s in 0..<2 {
            spawnThread(name: "signaller-\(s)") {
                for i in 0..<signals {
                    semaphores[s].signal()
                    if i % 8 == 0 { sleepNanoseconds(10_000) }
                }
                finished.signal()
            }
        }
        // Both signallers end, then the mover has taken what it can.
        #expect(waitUntil(timeout: .seconds(300)) { taken(0) + taken(1) >= 2 * signals })
        stop.store(true, ordering: .releasing)
        #expect(finished.wait(timeout: .seconds(300)))
        for s in 0..<2 {
            var left = 0
            while semaphores[s].wait(timeout: .zero) { left += 1 }
            #expect(taken(s) + left == signals, "semaphore \(s): taken \(taken(s)) + left \(left) must be its \(signals) signals")
            #expect(semaphores[s].waiterCount == 0)
        }
    }

    @Test("thread and task waiters share one FIFO")
    func fifoAcrossThreadsAndTasks() async throws {
        let semaphore = IOSemaphore(value: 0)
        let order = Locked<[String]>([])
        let queued = Atomic<Int>(0)
        let threadDone = Latch()
        spawnThread(name: "first") {
            queued.add(1, ordering: .relaxed)
            semaphore.wait()
            order.withLock { $0.append("thread") }
            threadDone.signal()
        }
        #expect(waitUntil { semaphore.waiterCount == 1 })
        let task = Task(executorPreference: IOQueue.global) {
            try await semaphore.wait()
            order.withLock { $0.append("task") }
        }
        #expect(waitUntil { semaphore.waiterCount == 2 })
        #expect(queued.load(ordering: .relaxed) == 1)
        #expect(semaphore.signal())
        #expect(threadDone.wait())
        #expect(order.withLock { $0 } == ["thread"])
        #expect(semaphore.signal())
        try await task.value
        #expect(order.withLock { $0 } == ["thread", "task"])
    }

    @Test("cancelling a task's wait throws CancellationError and takes nothing")
    func cancelAsyncWait() async {
        let semaphore = IOSemaphore(value: 0)
        let task = Task(executorPreference: IOQueue.global) { () -> Bool in
            do {
                try await semaphore.wait()
                return false
            } catch {
                return true
            }
        }
        #expect(waitUntil { semaphore.waiterCount == 1 })
        task.cancel()
        #expect(await task.value)
        #expect(semaphore.waiterCount == 0)
        #expect(!semaphore.signal(), "the cancelled waiter left the FIFO")
        #expect(semaphore.wait(timeout: .zero))
        let already = Task(executorPreference: IOQueue.global) { () -> Bool in
            withUnsafeCurrentTask { $0?.cancel() }
            do { try await semaphore.wait(); return false } catch { return true }
        }
        #expect(await already.value, "a task cancelled before it waits")
    }

    @Test("a semaphore released with waiters and borrowed counts is no error")
    func releasedWhileInUse() async {
        var semaphore: IOSemaphore? = IOSemaphore(value: 2)
        #expect(semaphore!.wait(timeout: .zero))
        #expect(semaphore!.wait(timeout: .zero))
        let waiter = Task(executorPreference: IOQueue.global) { [semaphore] in try await semaphore!.wait() }
        semaphore = nil
        milliseconds(10)
        waiter.cancel()
        let result = await waiter.result
        #expect(throws: CancellationError.self) { try result.get() }
    }

    @Test("value below 0 stops with a precondition failure")
    func negativeValue() async {
        await #expect(processExitsWith: .failure) {
            _ = IOSemaphore(value: -1)
        }
    }
}

/// The blocking `wait()` of an item, from a function that is not `async`
/// (in an `async` one the async overload is chosen).
private func blockingWait(_ item: IOWorkItem) { item.wait() }
