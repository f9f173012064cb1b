import RingIOBase

/// The waiting side that `IOGroup` and `IOWorkItem` share: blocked threads,
/// suspended tasks and notifications, all released when the owner's state
/// says it is done (a group empty, an item finished).
///
/// The owner keeps that state under `lock`; `done` reads it and is called
/// with `lock` held. When the state becomes done, the owner calls
/// `finishLocked()` with `lock` held and `run()`s what it returns after the
/// unlock (a notification may submit to a queue, a resumed task may run at
/// once: neither under the lock).
final class Completion: @unchecked Sendable {
    // @unchecked: `notifications` and `tasks` are read and written only with
    // `lock` held.
    let lock = ConditionLock()
    private var notifications: [(IOQueue, @Sendable () -> Void)] = []
    private var tasks: [UnsafeContinuation<Void, Never>] = []

    /// What `finishLocked()` released, to run after the unlock.
    struct Released {
        fileprivate let notifications: [(IOQueue, @Sendable () -> Void)]
        fileprivate let tasks: [UnsafeContinuation<Void, Never>]

        static var none: Released { Released(notifications: [], tasks: []) }

        /// Submits the notifications, then resumes the tasks.
        func run() {
            for (queue, work) in notifications { queue.async(work) }
            for task in tasks { task.resume() }
        }
    }

    /// The owner's state became done (`lock` held): wakes the blocked
    /// threads and hands back the tasks and notifications.
    func finishLocked() -> Released {
        lock.broadcast()
        defer {
            notifications = []
            tasks = []
        }
        return Released(notifications: notifications, tasks: tasks)
    }

    /// Blocks the calling thread until `done()`.
    func wait(until done: () -> Bool) {
        lock.withLock {
            while !done() { lock.wait() }
        }
    }

    /// Blocks the calling thread until `done()` or `timeout` passes.
    ///
    /// - Returns: `done()` at the end.
    func wait(until done: () -> Bool, timeout: Duration) -> Bool {
        let deadline = monotonicNanoseconds() &+ timeout.clampedNanoseconds
        return lock.withLock {
            while !done() {
                if !lock.wait(untilNanoseconds: deadline) { return done() }
            }
            return true
        }
    }

    /// Suspends the calling task, not its thread, until `done()`.
    func wait(until done: () -> Bool) async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let now = lock.withLock { () -> Bool in
                if done() { return true }
                tasks.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Runs `work` on `queue` once `done()`: at once if it is now.
    func notify(queue: IOQueue, _ work: @escaping @Sendable () -> Void, when done: () -> Bool) {
        let now = lock.withLock { () -> Bool in
            if done() { return true }
            notifications.append((queue, work))
            return false
        }
        if now { queue.async(work) }
    }
}
