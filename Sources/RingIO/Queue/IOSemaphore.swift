import RingIOBase

/// A counting semaphore whose waiters are threads or tasks, in one FIFO.
///
/// `wait` takes one from the value, or waits while it is 0; `signal` hands
/// its one to the oldest waiter, thread or task, or adds it to the value
/// when nobody waits. A waiter that times out or whose task is cancelled
/// leaves the FIFO and takes nothing. A semaphore released while waiters or
/// borrowed counts remain is not an error (libdispatch stops the process).
///
/// The corresponding libdispatch type is `dispatch_semaphore_t`.
public final class IOSemaphore: Sendable {
    /// One waiter in the FIFO.
    private final class Waiter: @unchecked Sendable {
        // @unchecked: every field is read and written with the semaphore's
        // `lock` held.
        /// The waiter got its count (threads: sleep ends).
        var granted = false
        /// A task's continuation (nil for a thread).
        var continuation: UnsafeContinuation<Void, any Error>?
        /// The task was cancelled before it queued.
        var cancelled = false
        /// Its ticket in `waiters` while queued.
        var ticket = -1
        init() {}
    }

    private let lock = ConditionLock()
    // Read and written only with `lock` held.
    private nonisolated(unsafe) var value: Int
    private nonisolated(unsafe) var waiters = TicketQueue<Waiter>()
    /// Threads asleep on `lock`'s condition (one: `signal`, more: `broadcast`).
    private nonisolated(unsafe) var sleepers = 0

    /// Creates a semaphore.
    ///
    /// - Parameter value: The starting count: 0 to order two threads, N to
    ///   let N holders at once.
    /// - Precondition: `value >= 0`.
    ///
    /// The corresponding libdispatch function is `dispatch_semaphore_create`.
    public init(value: Int) {
        precondition(value >= 0, "IOSemaphore(value:) needs a value >= 0, not \(value)")
        self.value = value
    }

    /// Threads and tasks waiting now (for tests and diagnostics).
    package var waiterCount: Int { lock.withLock { waiters.count } }

    /// Adds one: wakes the oldest waiter, or raises the value.
    ///
    /// - Returns: `true` when it woke a waiter.
    ///
    /// The corresponding libdispatch function is `dispatch_semaphore_signal`.
    @discardableResult
    public func signal() -> Bool {
        lock.lock()
        guard let waiter = waiters.popFirst() else {
            value += 1
            lock.unlock()
            return false
        }
        waiter.granted = true
        waiter.ticket = -1
        if let continuation = waiter.continuation {
            waiter.continuation = nil
            lock.unlock()
            continuation.resume()
            return true
        }
        let several = sleepers > 1
        lock.unlock()
        // After the unlock: the woken thread does not wake only to wait for
        // the mutex this thread still holds. (A spurious or late wake-up is
        // harmless: each waiter checks its own `granted` under the lock.)
        if several { lock.broadcast() } else { lock.signal() }
        return true
    }

    /// Takes one, blocking the calling thread while the value is 0.
    ///
    /// The corresponding libdispatch function is `dispatch_semaphore_wait`
    /// with `DISPATCH_TIME_FOREVER`.
    public func wait() {
        _ = wait(untilNanoseconds: nil)
    }

    /// Takes one, waiting at most `timeout`.
    ///
    /// - Parameter timeout: The longest wait.
    /// - Returns: `true` when it took one, `false` on timeout (nothing taken).
    ///
    /// The corresponding libdispatch function is `dispatch_semaphore_wait`.
    public func wait(timeout: Duration) -> Bool {
        wait(untilNanoseconds: monotonicNanoseconds() &+ timeout.clampedNanoseconds)
    }

    private func wait(untilNanoseconds deadline: UInt64?) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if value > 0 {
            value -= 1
            return true
        }
        let waiter = Waiter()
        waiter.ticket = waiters.append(waiter)
        sleepers += 1
        defer { sleepers -= 1 }
        while !waiter.granted {
            if let deadline {
                if !lock.wait(untilNanoseconds: deadline) && !waiter.granted {
                    waiters.remove(ticket: waiter.ticket)
                    return false
                }
            } else {
                lock.wait()
            }
        }
        return true
    }

    /// Takes one, suspending the calling task (not its thread) while the
    /// value is 0.
    ///
    /// - Throws: `CancellationError` when the task is cancelled before it
    ///   took one (it takes nothing then).
    public func wait() async throws(CancellationError) {
        let taken = lock.withLock { () -> Bool in
            if value > 0 {
                value -= 1
                return true
            }
            return false
        }
        if taken { return }
        let waiter = Waiter()
        do {
            try await withTaskCancellationHandler {
                try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                    enum Now { case taken, cancelled, queued }
                    let now = lock.withLock { () -> Now in
                        if waiter.cancelled { return .cancelled }
                        if value > 0 {
                            value -= 1
                            return .taken
                        }
                        waiter.continuation = continuation
                        waiter.ticket = waiters.append(waiter)
                        return .queued
                    }
                    switch now {
                    case .taken: continuation.resume()
                    case .cancelled: continuation.resume(throwing: CancellationError())
                    case .queued: break
                    }
                }
            } onCancel: {
                let continuation = lock.withLock { () -> UnsafeContinuation<Void, any Error>? in
                    waiter.cancelled = true
                    guard !waiter.granted, let continuation = waiter.continuation else { return nil }
                    waiters.remove(ticket: waiter.ticket)
                    waiter.continuation = nil
                    return continuation
                }
                continuation?.resume(throwing: CancellationError())
            }
        } catch {
            throw CancellationError()
        }
    }
}
