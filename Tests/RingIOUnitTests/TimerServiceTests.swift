import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIOQueue
@testable import RingIOBase

@Suite("Fallback timer service")
struct TimerServiceTests {
    @Test("timers fire in deadline order, never before their deadline")
    func firesInOrderNeverEarly() {
        let service = FallbackTimerService()
        let clock = ContinuousClock()
        let start = clock.now
        let fired = Locked<[(Int, ContinuousClock.Instant)]>([])
        let done = Latch(count: 20)
        // Armed in reverse order: 20 ms down to 1 ms after a base that
        // outlasts the arming (under ThreadSanitizer on a loaded machine,
        // arming 20 took over 20 ms once, and the 20 ms timer fired first).
        let base = start + .milliseconds(300)
        for i in (1...20).reversed() {
            let deadline = base + .milliseconds(i)
            _ = service.arm(deadline: deadline, leeway: .zero) {
                fired.withLock { $0.append((i, clock.now)) }
                done.signal()
            }
        }
        #expect(done.wait())
        let log = fired.withLock { $0 }
        #expect(log.map(\.0) == Array(1...20))
        for (i, at) in log { #expect(at >= base + .milliseconds(i)) }
    }

    @Test("timers of one deadline fire in arming order, slots reused or not")
    func equalDeadlinesInArmingOrder() {
        let service = FallbackTimerService()
        let clock = ContinuousClock()
        // Free a few slots first, so later timers reuse them.
        let early = (0..<8).map { _ in service.arm(deadline: clock.now + .seconds(60), leeway: .zero) {} }
        for token in early.reversed() { service.cancel(token) }
        let deadline = clock.now + .milliseconds(20)
        let order = Locked<[Int]>([])
        let done = Latch(count: 32)
        for i in 0..<32 {
            _ = service.arm(deadline: deadline, leeway: .zero) {
                order.withLock { $0.append(i) }
                done.signal()
            }
        }
        #expect(done.wait())
        #expect(order.withLock { $0 } == Array(0..<32))
    }

    @Test("a cancelled timer never fires; cancel says whether it stopped it")
    func cancel() {
        let service = FallbackTimerService()
        let clock = ContinuousClock()
        let ran = Atomic<Int>(0)
        // 500 ms: the cancel below must come before it, even on a loaded
        // machine under ThreadSanitizer (30 ms did not, there).
        let token = service.arm(deadline: clock.now + .milliseconds(500), leeway: .zero) {
            ran.add(1, ordering: .relaxed)
        }
        #expect(service.cancel(token))
        #expect(!service.cancel(token))
        let done = Latch(count: 1)
        let later = service.arm(deadline: clock.now + .milliseconds(550), leeway: .zero) { done.signal() }
        #expect(done.wait())
        #expect(!service.cancel(later), "a timer that fired cannot be cancelled")
        #expect(ran.load(ordering: .relaxed) == 0)
        #expect(service.pendingCount == 0)
    }

    @Test("100,000 pending timers: arming and cancelling stay cheap, one thread")
    func manyPending() {
        let service = FallbackTimerService()
        let clock = ContinuousClock()
        let far = clock.now + .seconds(3600)
        var tokens: [TimerToken] = []
        tokens.reserveCapacity(100_000)
        let armStart = clock.now
        for i in 0..<100_000 {
            tokens.append(service.arm(deadline: far + .microseconds(i * 7 % 1000), leeway: .zero) {})
        }
        let armTime = clock.now - armStart
        #expect(service.pendingCount == 100_000)
        // A near timer still fires promptly with 100,000 pending.
        let done = Latch(count: 1)
        _ = service.arm(deadline: clock.now + .milliseconds(5), leeway: .zero) { done.signal() }
        #expect(done.wait())
        let cancelStart = clock.now
        // Cancel from the middle outwards (not only the heap's last slot).
        var cancelled = 0
        for token in tokens.shuffled() where service.cancel(token) { cancelled += 1 }
        let cancelTime = clock.now - cancelStart
        #expect(cancelled == 100_000)
        #expect(service.pendingCount == 0)
        // O(log n) each: 100,000 arms or cancels took about 30 ms each way
        // here (4.4 s under ThreadSanitizer on a loaded machine); a linear
        // scan per call would take minutes. The bound only catches that: the
        // cost itself is held by the benchmarks (Benchmarks/results/queues.md).
        #expect(armTime < .seconds(60))
        #expect(cancelTime < .seconds(60))
    }

    @Test("the registry hands out the fallback until a service is installed")
    func registry() {
        // A registry of its own: the process's may already hold the shared
        // engine's service (tests of every target share one process).
        let registry = TimerServiceRegistry()
        #expect(registry.current === registry.fallback)
        let service = FallbackTimerService()
        registry.install(service)
        #expect(registry.current === service)
        #expect(registry.fallback !== service)
    }
}
