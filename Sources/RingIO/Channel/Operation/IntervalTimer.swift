import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// Repeating timers for the operations' delivery intervals, on one thread
/// started on first use.
///
/// A timer calls `tick` every `period` until `tick` returns false. `tick`
/// runs on the timer thread and must be short: operations use it to enqueue
/// a delivery on their queue.
final class IntervalTimers: Sendable {
    private struct Timer {
        var deadline: UInt64
        let period: UInt64
        let tick: @Sendable () -> Bool
    }

    // `timers` and `started` are read and written only with `lock` held.
    private let lock = ConditionLock()
    private nonisolated(unsafe) var timers: [Timer] = []
    private nonisolated(unsafe) var started = false

    static let shared = IntervalTimers()

    /// Calls `tick` every `period` (first after one period) until it returns false.
    func schedule(every period: Duration, _ tick: @escaping @Sendable () -> Bool) {
        let nanos = Swift.max(period.clampedNanoseconds, 1_000)
        let start = lock.withLock { () -> Bool in
            timers.append(Timer(deadline: monotonicNanoseconds() &+ nanos, period: nanos, tick: tick))
            lock.signal()
            if started { return false }
            started = true
            return true
        }
        if start {
            spawnThread(name: "ringio-timers") { [self] in run() }
        }
    }

    private func run() {
        lock.lock()
        while true {
            guard let next = timers.min(by: { $0.deadline < $1.deadline })?.deadline else {
                lock.wait()
                continue
            }
            let now = monotonicNanoseconds()
            if next > now {
                _ = lock.wait(untilNanoseconds: next)
                continue
            }
            var due: [Timer] = []
            timers.removeAll { t in
                if t.deadline <= now { due.append(t); return true }
                return false
            }
            lock.unlock()
            var again: [Timer] = []
            for var t in due where t.tick() {
                t.deadline = Swift.max(t.deadline &+ t.period, now)
                again.append(t)
            }
            lock.lock()
            timers.append(contentsOf: again)
        }
    }
}
