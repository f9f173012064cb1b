/// Swift concurrency on RingIO's queues.
///
/// A serial `IOQueue` is a `SerialExecutor`: an actor that returns
/// `queue.asUnownedSerialExecutor()` from `unownedExecutor` runs its methods on
/// that queue, so channel handlers delivered on the same queue touch the
/// actor's state without a hop:
///
/// ```swift
/// actor Counter {
///     let queue = IOQueue(label: "counter")
///     nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }
///     var bytes = 0
/// }
/// ```
///
/// Any `IOQueue` is a `TaskExecutor` (`Task(executorPreference: queue)`).
extension IOQueue: SerialExecutor, TaskExecutor {
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        switch kind {
        case .serial:
            async {
                job.runSynchronously(
                    isolatedTo: self.asUnownedSerialExecutor(),
                    taskExecutor: self.asUnownedTaskExecutor()
                )
            }
        case .concurrent:
            async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    /// - Precondition: the queue is serial; a concurrent queue cannot isolate an actor.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        precondition(
            kind == .serial,
            "IOQueue '\(label)' is concurrent: only a serial IOQueue can be an actor's SerialExecutor"
        )
        return UnownedSerialExecutor(ordinary: self)
    }

    public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    public func checkIsolated() {
        precondition(
            IOQueue.isCurrentThreadRunning(self),
            "expected to run on IOQueue '\(label)', but the current thread is not running it"
        )
    }

    public func isIsolatingCurrentContext() -> Bool? {
        IOQueue.isCurrentThreadRunning(self)
    }
}
