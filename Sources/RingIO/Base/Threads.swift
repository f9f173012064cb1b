#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing

/// Starts a detached pthread named `name` (at most 15 bytes are kept) that runs `body`.
///
/// - Returns: the `pthread_create` error, or 0 when the thread started.
///
/// SIGPIPE is blocked on every library thread, so a write to a closed pipe or
/// socket reports EPIPE instead of killing the process; so is every other
/// asynchronous signal, so that the library's threads never take a signal
/// meant for the program (signal sources read them through a signalfd).
@discardableResult
package func spawnThread(name: String, _ body: @escaping @Sendable () -> Void) -> Int32 {
    final class Box: Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
    }
    let box = Unmanaged.passRetained(Box(name: name, body: body)).toOpaque()
    var attr = pthread_attr_t()
    pthread_attr_init(&attr)
    pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
    var thread = pthread_t()
    let rc = pthread_create(&thread, &attr, { raw in
        let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
        blockAsynchronousSignalsOnThisThread()
        cliburing_set_thread_name(box.name)
        box.body()
        return nil
    }, box)
    pthread_attr_destroy(&attr)
    if rc != 0 { Unmanaged<Box>.fromOpaque(box).release() }
    return rc
}

package func blockSIGPIPEOnThisThread() {
    var set = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, SIGPIPE)
    pthread_sigmask(SIG_BLOCK, &set, nil)
}

/// Blocks every signal but the synchronous ones (a fault raised by the
/// thread's own code: SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS,
/// SIGABRT) and SIGPROF (profilers) on the calling thread.
package func blockAsynchronousSignalsOnThisThread() {
    var set = sigset_t()
    sigfillset(&set)
    for sig in [SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT, SIGPROF] { sigdelset(&set, sig) }
    pthread_sigmask(SIG_BLOCK, &set, nil)
}

/// A per-thread slot holding an unretained pointer (the queue a worker is running).
@usableFromInline
package struct ThreadLocalPointer: Sendable {
    @usableFromInline let key: pthread_key_t

    package init() {
        var key = pthread_key_t()
        let rc = pthread_key_create(&key, nil)
        precondition(rc == 0, "RingIO: pthread_key_create failed with \(rc)")
        self.key = key
    }

    @inlinable package var value: UnsafeMutableRawPointer? {
        get { pthread_getspecific(key) }
        nonmutating set { pthread_setspecific(key, newValue) }
    }
}

/// A thread's kernel id, published once by the thread itself when it
/// starts, and waited for by others (a signal source forwards signals to
/// the thread that reads its signalfd, which may not have started yet).
package final class PublishedThreadID: @unchecked Sendable {
    // @unchecked: `id` is read and written only with `lock` held.
    private let lock = ConditionLock()
    private var id: Int32 = 0

    package init() {}

    /// Publishes `id` (the calling thread's) and wakes the waiters.
    package func publish(_ id: Int32) {
        lock.withLock {
            self.id = id
            lock.broadcast()
        }
    }

    /// The id; 0 while not published.
    package var value: Int32 { lock.withLock { id } }

    /// The id, waiting up to `timeoutNanoseconds` for it; 0 when it was not
    /// published in time.
    package func wait(timeoutNanoseconds: UInt64) -> Int32 {
        let deadline = monotonicNanoseconds() &+ timeoutNanoseconds
        return lock.withLock {
            while id == 0 {
                if !lock.wait(untilNanoseconds: deadline) && id == 0 { return 0 }
            }
            return id
        }
    }
}
