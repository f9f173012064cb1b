import RingIOBase

/// Where the library finds its ``TimerService``: the one installed (the
/// engine's ring-backed service), or until then a fallback with one thread
/// for every timer.
///
/// `IOQueue.asyncAfter`, channel intervals and timer sources arm their
/// deadlines on `current`. A timer armed on the fallback before a service is
/// installed stays there and fires from there.
package enum TimerServices {
    private static let installed = Locked<(any TimerService)?>(nil)
    private static let fallback = FallbackTimerService()

    /// The installed service, or the fallback when none is.
    package static var current: any TimerService {
        installed.withLock { $0 } ?? fallback
    }

    /// Makes `service` the one ``current`` returns from now on.
    package static func install(_ service: any TimerService) {
        installed.withLock { $0 = service }
    }

    /// The fallback service (for tests and benchmarks that need it even
    /// after another service is installed).
    package static var fallbackService: any TimerService { fallback }
}

/// The timer service used until an engine installs its own: one thread
/// (started by the first `arm`) sleeps until the earliest deadline of a
/// binary min-heap and fires what is due.
///
/// `arm` and `cancel` are O(log n) in the number of pending timers (a
/// dictionary maps each token to its heap slot), so 100,000 pending timers
/// cost what ten do per call, and no thread each. A timer never fires before
/// its deadline: the thread sleeps on CLOCK_MONOTONIC and checks
/// `ContinuousClock.now` (CLOCK_BOOTTIME on Linux) again before firing.
/// `leeway` is accepted and not used: the fallback fires as soon as it can.
package final class FallbackTimerService: TimerService, @unchecked Sendable {
    // @unchecked: `heap`, `slots`, `nextID`, `threadStarted` and
    // `sleepingUntil` are read and written only with `lock` held.
    private struct Entry {
        let deadline: ContinuousClock.Instant
        let id: UInt64
        let fire: @Sendable () -> Void

        /// Deadline order; equal deadlines fire in arming order (ids grow).
        @inline(__always)
        func precedes(_ other: Entry) -> Bool {
            deadline < other.deadline || (deadline == other.deadline && id < other.id)
        }
    }

    private let lock = ConditionLock()
    private var heap: [Entry] = []
    private var slots: [UInt64: Int] = [:]
    private var nextID: UInt64 = 1
    private var threadStarted = false
    /// The deadline the thread sleeps until (`nil`: no timer, or firing).
    private var sleepingUntil: ContinuousClock.Instant?

    package init() {}

    /// The number of armed timers (for tests).
    package var pendingCount: Int { lock.withLock { heap.count } }

    package func arm(deadline: ContinuousClock.Instant, leeway: Duration,
                     _ fire: @escaping @Sendable () -> Void) -> TimerToken {
        var start = false
        let id = lock.withLock { () -> UInt64 in
            let id = nextID
            nextID &+= 1
            heap.append(Entry(deadline: deadline, id: id, fire: fire))
            slots[id] = heap.count - 1
            siftUp(heap.count - 1)
            if !threadStarted {
                threadStarted = true
                start = true
            } else if heap[0].id == id, sleepingUntil.map({ deadline < $0 }) ?? true {
                // The new earliest deadline: wake the thread to sleep less.
                lock.signal()
            }
            return id
        }
        if start {
            let rc = spawnThread(name: "ringio-timers") { [self] in run() }
            precondition(rc == 0, "RingIO: cannot start the timer thread (pthread_create: \(rc))")
        }
        return TimerToken(id: id)
    }

    @discardableResult
    package func cancel(_ token: TimerToken) -> Bool {
        lock.withLock {
            guard let slot = slots[token.id] else { return false }
            remove(at: slot)
            return true
        }
    }

    // MARK: - the timer thread

    private func run() {
        let clock = ContinuousClock()
        lock.lock()
        while true {
            guard let first = heap.first else {
                sleepingUntil = nil
                lock.wait()
                continue
            }
            let now = clock.now
            if first.deadline > now {
                sleepingUntil = first.deadline
                // Monotonic and boot time advance together while the machine
                // runs; the loop checks the continuous clock again on waking.
                let wait = (first.deadline - now).clampedNanoseconds
                _ = lock.wait(untilNanoseconds: monotonicNanoseconds() &+ Swift.max(wait, 1))
                continue
            }
            sleepingUntil = nil
            // Everything due now, in deadline order, fired outside the lock
            // (a `fire` may arm or cancel).
            var due: [@Sendable () -> Void] = []
            while let head = heap.first, head.deadline <= now {
                due.append(head.fire)
                remove(at: 0)
            }
            lock.unlock()
            for fire in due { fire() }
            lock.lock()
        }
    }

    // MARK: - the heap (under the lock)

    private func remove(at slot: Int) {
        slots[heap[slot].id] = nil
        let last = heap.count - 1
        if slot != last {
            heap.swapAt(slot, last)
            slots[heap[slot].id] = slot
        }
        heap.removeLast()
        if slot < heap.count {
            siftDown(slot)
            siftUp(slot)
        }
    }

    private func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].precedes(heap[parent]) else { break }
            swap(child, parent)
            child = parent
        }
    }

    private func siftDown(_ start: Int) {
        var parent = start
        let count = heap.count
        while true {
            let left = 2 * parent + 1
            guard left < count else { break }
            var best = left
            if left + 1 < count && heap[left + 1].precedes(heap[left]) { best = left + 1 }
            guard heap[best].precedes(heap[parent]) else { break }
            swap(parent, best)
            parent = best
        }
    }

    @inline(__always)
    private func swap(_ a: Int, _ b: Int) {
        heap.swapAt(a, b)
        slots[heap[a].id] = a
        slots[heap[b].id] = b
    }
}
