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
///
/// The two roles go through two objects. Swift's runtime hands an executor
/// its jobs through one method, `enqueue(_:)`, whichever role it plays, so
/// one object cannot tell an actor's job (to run isolated to the queue)
/// from a preferring task's (to run as nonisolated code on it). Run as an
/// actor's, a task's job would leave its code "isolated" to the queue, and
/// the runtime would send the task back through the queue at its next step
/// into nonisolated code: an extra enqueue and drain per `await`. So the
/// queue is its own task executor (the runtime retains and releases it as
/// such), and a small companion object, `IOQueueSerialExecutor`, is its
/// serial executor identity: jobs the queue gets are tasks', jobs the
/// companion gets are actors'.
extension IOQueue: SerialExecutor, TaskExecutor {
    /// Runs `job`, the next part of a task that prefers this queue, as one
    /// work item of the queue (in order with its other work on a serial
    /// queue), as nonisolated code. A task on the ring queue
    /// (`IOEngine.queue`) resumed by a completion during a reap is queued
    /// with that reap's batch and runs on the ring thread right after it,
    /// with no wake-up.
    public func enqueue(_ job: consuming ExecutorJob) {
        // The job itself is the item (no closure around it).
        enqueue(.job(UnownedJob(job), isolated: false))
    }

    /// Runs a job item of this serial queue (its drain's thread, which owns it).
    @inline(__always)
    func runSerialJob(_ job: UnownedJob, isolated: Bool) {
        jobsRun.add(1, ordering: .relaxed)
        if isolated {
            job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
        } else {
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    /// - Precondition: the queue is serial; a concurrent queue cannot isolate an actor.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        precondition(
            kind == .serial,
            "IOQueue '\(label)' is concurrent: only a serial IOQueue can be an actor's SerialExecutor"
        )
        return UnownedSerialExecutor(ordinary: serialExecutor)
    }

    /// This queue as a task executor: `Task(executorPreference: queue)` or
    /// `withTaskExecutorPreference(queue)` runs a task's nonisolated code,
    /// the code after each `await` included, on the queue.
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

/// The serial-executor role of a serial `IOQueue` (see above): the jobs it
/// gets are actors', and run on the queue isolated to it.
// @unchecked: `queue` is set once, by the queue's initializer, before the
// queue (and so this object) is shared with any other thread.
final class IOQueueSerialExecutor: SerialExecutor, @unchecked Sendable {
    // Unowned: the queue owns this object (a strong reference back would
    // keep every queue alive forever), and the runtime holds serial
    // executors unowned, an actor keeping its executor (here, its queue)
    // alive. So this object never outlives its queue.
    private unowned(unsafe) var queue: IOQueue?

    init() {}

    func bind(_ queue: IOQueue) { self.queue = queue }

    func enqueue(_ job: consuming ExecutorJob) {
        queue!.enqueue(.job(UnownedJob(job), isolated: true))
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    func checkIsolated() {
        queue!.checkIsolated()
    }

    func isIsolatingCurrentContext() -> Bool? {
        queue!.isIsolatingCurrentContext()
    }
}
