import RingIOQueue

extension IOSource {
    /// The deliveries as an asynchronous sequence: each element is one
    /// delivery's merged ``data``. It replaces the event handler.
    ///
    /// While the consumer has not asked for the next element, the source
    /// holds events back and merges them, as it does while a handler runs.
    /// The sequence finishes after ``cancel()``, or when the task that
    /// waits on it is cancelled (the source itself stays as it was).
    ///
    /// ```swift
    /// for await fires in timer.events() { print("fired \(fires)x") }
    /// ```
    ///
    /// - Precondition: called once per source.
    public final func events() -> Events {
        state.withLock { s in
            precondition(!s.eventsMode, "IOSource.events() called twice on one source")
            s.eventsMode = true
        }
        return Events(source: self)
    }

    /// The deliveries of one source (see ``IOSource/events()``).
    public struct Events: AsyncSequence, Sendable {
        public typealias Element = UInt
        public typealias Failure = Never

        let source: IOSource

        public func makeAsyncIterator() -> Iterator { Iterator(source: source) }

        /// Waits for the next delivery.
        public struct Iterator: AsyncIteratorProtocol {
            public typealias Element = UInt
            public typealias Failure = Never

            let source: IOSource

            /// The next delivery's data; nil once the source is cancelled.
            public mutating func next() async -> UInt? {
                await source.nextEvent()
            }

            public mutating func next(isolation actor: isolated (any Actor)?) async -> UInt? {
                await source.nextEvent()
            }
        }
    }

    /// The consumer is back: the previous element's level check, then wait.
    fileprivate func nextEvent() async -> UInt? {
        let wasBusy = state.withLock { s -> Bool in
            defer { s.consumerBusy = false }
            return s.consumerBusy
        }
        if wasBusy { afterDelivery() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<UInt?, Never>) in
                let (start, endNow) = state.withLock { s -> (Bool, Bool) in
                    if s.phase == .cancelled || Task.isCancelled { return (false, true) }
                    precondition(s.waiter == nil, "IOSource.events(): two consumers wait on one source")
                    s.waiter = c
                    return (scheduleLocked(&s), false)
                }
                if endNow { c.resume(returning: nil) }
                if start { queue.async { self.deliver() } }
            }
        } onCancel: {
            let waiter = state.withLock { s -> CheckedContinuation<UInt?, Never>? in
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume(returning: nil)
        }
    }
}
