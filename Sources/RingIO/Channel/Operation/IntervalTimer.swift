import RingIOBase
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// Repeating ticks for the operations' delivery intervals, on the engine's
/// timers (no thread of their own, an idle pool worker waits for the
/// earliest deadline; this was a `ringio-timers` thread before).
///
/// A tick calls `tick` every `period` until `tick` returns false. `tick`
/// runs on the engine's thread and must be short: operations use it to
/// enqueue a delivery on their queue.
enum IntervalTicks {
    /// Calls `tick` every `period` (first after one period; at least 1 µs)
    /// until it returns false.
    static func schedule(on timers: any TimerService, every period: Duration,
                         _ tick: @escaping @Sendable () -> Bool) {
        let period = Swift.max(period, .microseconds(1))
        arm(timers, at: .now + period, every: period, tick)
    }

    private static func arm(_ timers: any TimerService, at deadline: ContinuousClock.Instant, every period: Duration,
                            _ tick: @escaping @Sendable () -> Bool) {
        _ = timers.arm(deadline: deadline, leeway: .zero) {
            guard tick() else { return }
            // After a stall the next tick is one period from now, not a
            // burst of the ticks missed (as the timer thread did).
            arm(timers, at: Swift.max(deadline + period, .now), every: period, tick)
        }
    }
}
