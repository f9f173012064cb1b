#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value behind a pthread mutex.
///
/// The library uses this rather than `Synchronization.Mutex`: on Linux that
/// mutex hands ownership over in the kernel (a priority-inheritance futex),
/// where ThreadSanitizer cannot see the ordering and reports false races;
/// `pthread_mutex_t` is understood by the sanitizer and costs the same
/// uncontended.
@usableFromInline package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is read and written only inside `withLock`, with
    // the mutex held; the mutex lives in its own allocation and never moves.
    // `@usableFromInline` (not private): `withLock` is inlined into the
    // layers above, across the module boundary. `@exclusivity(unchecked)`:
    // the mutex already makes each access exclusive (a nested `withLock` on
    // the same value deadlocks before it could overlap), so the runtime's
    // dynamic check, a thread-local lookup per access, can find nothing.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @exclusivity(unchecked) @usableFromInline var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inlinable @inline(__always)
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

/// A bare pthread mutex, for state that is locked and unlocked around short
/// sections and never waited on. `ConditionLock` adds a condition variable
/// to one (two more allocations and several calls to set it up: too much for
/// an object made per I/O operation).
@usableFromInline package final class PlainLock: @unchecked Sendable {
    // @unchecked: the only stored state is the mutex, which is itself the
    // synchronisation; it lives in its own allocation and never moves.
    @usableFromInline package let mutex: UnsafeMutablePointer<pthread_mutex_t>

    package init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inlinable @inline(__always) package func lock() { pthread_mutex_lock(mutex) }
    @inlinable @inline(__always) package func unlock() { pthread_mutex_unlock(mutex) }

    @inlinable @inline(__always)
    package func withLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}
