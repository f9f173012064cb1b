import RingIOBase

/// Where the library finds its ``TimerService``: the one installed (the
/// engine's ring-backed service), or until then a fallback with one thread
/// for every timer.
///
/// `IOQueue.asyncAfter`, channel intervals and timer sources arm their
/// deadlines on `current`. A timer armed on the fallback before a service is
/// installed stays there and fires from there.
package enum TimerServices {
    /// The process's registry.
    private static let registry = TimerServiceRegistry()

    /// The installed service, or the fallback when none is.
    package static var current: any TimerService { registry.current }

    /// Makes `service` the one ``current`` returns from now on.
    package static func install(_ service: any TimerService) { registry.install(service) }

    /// The fallback service (for tests and benchmarks that need it even
    /// after another service is installed).
    package static var fallbackService: any TimerService { registry.fallback }
}

/// A fallback service and the one installed over it (`TimerServices` keeps
/// the process's; a test makes its own, as the process's may already have
/// the shared engine's installed).
package final class TimerServiceRegistry: Sendable {
    private let installed = Locked<(any TimerService)?>(nil)
    /// The service `current` returns until one is installed.
    package let fallback: any TimerService

    package init(fallback: any TimerService = FallbackTimerService()) {
        self.fallback = fallback
    }

    /// The installed service, or the fallback when none is.
    package var current: any TimerService {
        installed.withLock { $0 } ?? fallback
    }

    /// Makes `service` the one `current` returns from now on.
    package func install(_ service: any TimerService) {
        installed.withLock { $0 = service }
    }
}

/// The timer service used until an engine installs its own: one thread
/// (started by the first `arm`) sleeps until the earliest deadline of a
/// binary min-heap and fires what is due.
///
/// `arm` is O(log n) in the number of pending timers and `cancel` O(1)
/// amortized (see `TimerTable`, which the engine's service uses too). So
/// 100,000 pending timers cost what ten do per call, and no thread each.
/// (Entries holding the closure, with a token-to-slot dictionary updated
/// on every sift, cost 2x the CPU of Dispatch's `asyncAfter` for 100,000
/// one-shots.) A timer never fires before its deadline: the thread sleeps
/// on CLOCK_MONOTONIC and checks `ContinuousClock.now` (CLOCK_BOOTTIME on
/// Linux) again before firing. `leeway` is accepted and not used: the
/// fallback fires as soon as it can.
package final class FallbackTimerService: TimerService, @unchecked Sendable {
    // @unchecked: every stored `var` is read and written only with `lock`
    // held.
    private let lock = ConditionLock()
    private let epoch = ContinuousClock.now
    private var table = TimerTable<@Sendable () -> Void>()
    private var threadStarted = false
    /// The deadline the thread sleeps until (`nil`: no timer, or firing).
    private var sleepingUntil: Int64?

    package init() {}

    /// The number of armed timers (for tests).
    package var pendingCount: Int { lock.withLock { table.liveCount } }

    /// `instant` as nanoseconds from `epoch` (clamped to about ±285 years).
    private func nanoseconds(_ instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = (instant - epoch).components
        let clamped = Swift.min(Swift.max(seconds, -9_000_000_000), 9_000_000_000)
        return clamped * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    package func arm(deadline: ContinuousClock.Instant, leeway: Duration,
                     _ fire: @escaping @Sendable () -> Void) -> TimerToken {
        let when = nanoseconds(deadline)
        var start = false
        let id = lock.withLock { () -> UInt64 in
            let id = table.arm(fire, at: when)
            if !threadStarted {
                threadStarted = true
                start = true
            } else if table.heap.first?.payload == id, sleepingUntil.map({ when < $0 }) ?? true {
                // The new earliest deadline: wake the thread to sleep less.
                lock.signal()
            }
            return id
        }
        if start {
            let rc = spawnThread(name: "ringio-after") { [self] in run() }
            precondition(rc == 0, "RingIO: cannot start the timer thread (pthread_create: \(rc))")
        }
        return TimerToken(id: id)
    }

    @discardableResult
    package func cancel(_ token: TimerToken) -> Bool {
        lock.withLock { table.cancel(token.id) }
    }

    // MARK: - the timer thread

    private func run() {
        let clock = ContinuousClock()
        let batch = DeliveryBatch()
        lock.lock()
        while true {
            guard let first = table.first() else {
                sleepingUntil = nil
                lock.wait()
                continue
            }
            let now = nanoseconds(clock.now)
            if first.when > now {
                sleepingUntil = first.when
                // Monotonic and boot time advance together while the machine
                // runs; the loop checks the continuous clock again on waking.
                let wait = UInt64(first.when - now)
                _ = lock.wait(untilNanoseconds: monotonicNanoseconds() &+ wait)
                continue
            }
            sleepingUntil = nil
            // Everything due now, in deadline order, fired outside the lock
            // (a `fire` may arm or cancel).
            var due: [@Sendable () -> Void] = []
            while let head = table.firstDue(by: now) {
                table.removeFirst()
                if let fire = table.take(head.id) { due.append(fire) }
            }
            lock.unlock()
            // The work the fires enqueue goes to the pool in one batch (one
            // pool lock and wake-up per batch, not per timer).
            batch.collect { for fire in due { fire() } }
            lock.lock()
        }
    }
}
