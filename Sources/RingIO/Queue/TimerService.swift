/// Deadlines for everything above the queue layer: `asyncAfter`, channel
/// delivery intervals and timer sources share one mechanism, with no thread
/// per pending timer.
///
/// The queue layer defines it and keeps a fallback; the engine, a layer
/// above, installs its own (on the worker pool's alarm) when it starts.
package protocol TimerService: AnyObject, Sendable {
    /// Arms a one-shot timer: `fire` runs once, never before `deadline` and,
    /// on a machine that is not overloaded, no later than `deadline + leeway`.
    ///
    /// `fire` runs on the service's own thread (a pool worker, or the
    /// fallback's timer thread) and must be short: it enqueues work, nothing
    /// more.
    ///
    /// - Returns: the token that ``cancel(_:)`` takes.
    func arm(deadline: ContinuousClock.Instant, leeway: Duration,
             _ fire: @escaping @Sendable () -> Void) -> TimerToken

    /// Disarms the timer of `token`.
    ///
    /// - Returns: true when `fire` will not run; false when it has run, is
    ///   running, or the token is unknown.
    @discardableResult
    func cancel(_ token: TimerToken) -> Bool
}

/// Names one armed timer of a ``TimerService``.
package struct TimerToken: Hashable, Sendable {
    package let id: UInt64
    package init(id: UInt64) { self.id = id }
}
