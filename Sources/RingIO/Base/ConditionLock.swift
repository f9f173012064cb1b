#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A pthread mutex with one condition variable, for the few places that must
/// sleep until state changes (worker threads, `IOGroup.wait`, `IOQueue.sync`).
///
/// `Synchronization.Mutex` has no condition variable; this is the small
/// primitive NIO calls `ConditionLock`. The pthread objects live in manually
/// allocated memory so that their addresses never move.
@usableFromInline package final class ConditionLock: @unchecked Sendable {
    // @unchecked: the only stored state is the mutex (in `plain`) and the
    // condition, which are themselves the synchronisation; neither moves.
    // `@usableFromInline`: lock, unlock and signal are inlined into the
    // queues and the engine, other modules.
    @usableFromInline let plain = PlainLock()
    @usableFromInline let cond: UnsafeMutablePointer<pthread_cond_t>

    fileprivate var mutex: UnsafeMutablePointer<pthread_mutex_t> { plain.mutex }

    package init() {
        cond = makeMonotonicCondition()
    }

    deinit {
        pthread_cond_destroy(cond)
        cond.deallocate()
    }

    @inlinable @inline(__always) package func lock() { plain.lock() }
    @inlinable @inline(__always) package func unlock() { plain.unlock() }

    @inlinable @inline(__always)
    package func withLock<R>(_ body: () throws -> R) rethrows -> R {
        try plain.withLock(body)
    }

    /// Waits on the condition; the lock must be held.
    package func wait() { pthread_cond_wait(cond, mutex) }

    /// Waits until `deadline` (CLOCK_MONOTONIC nanoseconds); returns false on timeout.
    package func wait(untilNanoseconds deadline: UInt64) -> Bool {
        var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(cond, mutex, &ts) != ETIMEDOUT
    }

    @inlinable package func signal() { pthread_cond_signal(cond) }
    @inlinable package func broadcast() { pthread_cond_broadcast(cond) }
}

/// CLOCK_MONOTONIC in nanoseconds.
@inlinable @inline(__always)
package func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

extension Duration {
    /// The duration in whole nanoseconds, clamped to `0...UInt64.max / 2`.
    package var clampedNanoseconds: UInt64 {
        let (s, atto) = components
        if s < 0 { return 0 }
        if s > 4_000_000_000 { return UInt64.max / 2 }
        return UInt64(s) * 1_000_000_000 + UInt64(atto / 1_000_000_000)
    }
}

/// A second condition variable bound to a `ConditionLock`'s mutex, for a lock
/// guarding state that two kinds of waiter sleep on (workers and the watchdog).
package final class Condition: @unchecked Sendable {
    // @unchecked: holds only the pthread condition (itself a synchronisation
    // primitive, never moved) and the lock whose mutex it waits with.
    private let lock: ConditionLock
    private let cond: UnsafeMutablePointer<pthread_cond_t>

    package init(lock: ConditionLock) {
        self.lock = lock
        cond = makeMonotonicCondition()
    }

    deinit {
        pthread_cond_destroy(cond)
        cond.deallocate()
    }

    /// Waits; the lock must be held.
    package func wait() { pthread_cond_wait(cond, lock.mutex) }

    /// Waits until `deadline` (CLOCK_MONOTONIC nanoseconds); returns false on timeout.
    package func wait(untilNanoseconds deadline: UInt64) -> Bool {
        var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(cond, lock.mutex, &ts) != ETIMEDOUT
    }

    package func signal() { pthread_cond_signal(cond) }
    package func broadcast() { pthread_cond_broadcast(cond) }
}

/// A condition variable whose timed waits use CLOCK_MONOTONIC.
private func makeMonotonicCondition() -> UnsafeMutablePointer<pthread_cond_t> {
    let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    var cattr = pthread_condattr_t()
    pthread_condattr_init(&cattr)
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC)
    pthread_cond_init(cond, &cattr)
    pthread_condattr_destroy(&cattr)
    return cond
}
