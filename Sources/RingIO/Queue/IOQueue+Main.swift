import RingIOBase

/// Runs the main queue's drains on the thread inside `IOQueue.runMain()`.
///
/// Before `runMain` is called, a drain request is only remembered: work
/// submitted to `IOQueue.main` waits for the main thread.
final class MainQueueRunner: QueueRunner, @unchecked Sendable {
    // @unchecked: `requested` is read and written only with `lock` held.
    private let lock = ConditionLock()
    private var requested = 0

    func scheduleDrain(_ queue: IOQueue) -> Bool {
        lock.withLock {
            requested += 1
            lock.signal()
        }
        return true
    }

    /// Serves `queue` on the calling thread for ever.
    func serve(_ queue: IOQueue) -> Never {
        while true {
            lock.withLock {
                while requested == 0 { lock.wait() }
                requested -= 1
            }
            queue.drainSerial()
        }
    }
}

extension IOQueue {
    private static let mainRunner = MainQueueRunner()
    private static let _main = IOQueue(label: "ringio.main", kind: .serial, priority: .userInteractive,
                                       target: nil, runner: mainRunner, globalRoot: false)

    /// The serial queue of the main thread: its items run on the thread
    /// that called ``runMain()``, and only there. Work submitted before that
    /// call waits for it.
    ///
    /// The corresponding libdispatch function is `dispatch_get_main_queue`.
    public static var main: IOQueue { _main }

    /// Serves ``main`` on the calling thread, the process's main thread, for
    /// ever; end the process from an item (`exit`).
    ///
    /// - Precondition: the caller is the main thread.
    ///
    /// The corresponding libdispatch function is `dispatch_main`.
    public static func runMain() -> Never {
        precondition(
            Syscall.isMainThread(),
            "IOQueue.runMain() called off the main thread: only the main thread can serve IOQueue.main"
        )
        mainRunner.serve(_main)
    }
}
