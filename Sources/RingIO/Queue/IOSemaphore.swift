#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIOBase
import Synchronization

/// A counting semaphore whose waiters are threads or tasks, in one FIFO.
///
/// `wait` takes one from the value, or waits while it is 0; `signal` hands
/// its one to the oldest waiter, thread or task, or adds it to the value
/// when nobody waits. A waiter that times out or whose task is cancelled
/// leaves the FIFO and takes nothing, unless a `signal` on its way to it
/// already counted it (it then takes that one). A semaphore released while
/// waiters or borrowed counts remain is not an error (libdispatch stops the
/// process).
///
/// The corresponding libdispatch type is `dispatch_semaphore_t`.
public final class IOSemaphore: Sendable {
    /// One waiter in the FIFO.
    private final class Waiter: @unchecked Sendable {
        // @unchecked: `granted`, `continuation`, `cancelled` and `ticket` are
        // read and written with the semaphore's `lock` held, or (`reset`) by
        // a thread's own waiter between its waits, when no FIFO holds it;
        // `word` is an atomic (its own allocation, never moved).
        /// The waiter got its count.
        var granted = false
        /// A task's continuation (nil for a thread).
        var continuation: UnsafeContinuation<Void, any Error>?
        /// The task was cancelled before it queued.
        var cancelled = false
        /// Its ticket in `waiters` while queued.
        var ticket = -1
        /// A thread's futex word: `queued`, `asleep` or `handedOver`. The
        /// signaller stores `handedOver` with release after the unlock, the
        /// thread loads it with acquire: the hand-over is visible to
        /// ThreadSanitizer, which does not see the futex.
        let word: UnsafeMutablePointer<Atomic<UInt32>>?

        static let queued: UInt32 = 0
        static let asleep: UInt32 = 1
        static let handedOver: UInt32 = 2

        init(thread: Bool) {
            if thread {
                let word = UnsafeMutablePointer<Atomic<UInt32>>.allocate(capacity: 1)
                word.initialize(to: Atomic(Waiter.queued))
                self.word = word
            } else {
                word = nil
            }
        }

        deinit {
            if let word {
                word.deinitialize(count: 1)
                word.deallocate()
            }
        }

        /// The word as the futex sees it (`Atomic<UInt32>` is laid out as a `UInt32`).
        var futexAddress: UnsafeMutablePointer<UInt32> {
            UnsafeMutableRawPointer(word!).assumingMemoryBound(to: UInt32.self)
        }

        /// The calling thread's waiter, made on its first blocking wait and
        /// reused by the next ones (a thread is in one blocking wait at a
        /// time), so a wait that sleeps allocates nothing. When a wait
        /// returns, no FIFO holds the waiter and no signaller stores to its
        /// word again; a signaller may still be about to `futex_wake` it,
        /// which the next wait sees as a spurious wake-up and sleeps again.
        static func ofThisThread() -> Waiter {
            if let raw = pthread_getspecific(IOSemaphore.threadKey) {
                return Unmanaged<Waiter>.fromOpaque(raw).takeUnretainedValue()
            }
            let waiter = Waiter(thread: true)
            // The slot holds one retain, released when the thread exits.
            pthread_setspecific(IOSemaphore.threadKey, Unmanaged.passRetained(waiter).toOpaque())
            return waiter
        }

        /// Readies the thread's waiter for its next wait. Its last wait ended
        /// after the last write of anyone else (the signaller's release store
        /// of `handedOver`, or the lock of the withdrawal).
        func reset() {
            granted = false
            ticket = -1
            word!.pointee.store(Waiter.queued, ordering: .relaxed)
        }
    }

    /// The slot of each thread's reused waiter (see `Waiter.ofThisThread`).
    private static let threadKey: pthread_key_t = {
        var key = pthread_key_t()
        let rc = pthread_key_create(&key) { raw in
            if let raw { Unmanaged<AnyObject>.fromOpaque(raw).release() }
        }
        precondition(rc == 0, "RingIO: pthread_key_create failed with \(rc)")
        return key
    }()

    /// The value less the waiters that took their one ahead (registered):
    /// above 0, that many `wait`s return at once; below 0, `-count` threads
    /// or tasks wait or are about to, and a `signal` goes to one of them.
    /// `wait` and `signal` change it with one atomic step each; they take
    /// `lock` only to hand a count from a signaller to a waiter.
    private let count: Atomic<Int>
    /// The CPU of the last `signal` that handed a count to a waiter (-1:
    /// none yet). A thread about to sleep polls its word for a moment only
    /// when that signaller ran on another CPU (see `pollNanoseconds`).
    private let signallerCPU = Atomic<Int>(-1)
    /// How long a thread waiter polls its word before it sleeps, when the
    /// last signaller ran on another CPU: a hand-off between two threads
    /// that each keep a CPU then takes no wake-up (which, between idle
    /// virtual CPUs, costs 20 µs and more). On the waiter's own CPU the
    /// signaller could not run while it polls, so it sleeps at once (on a
    /// loaded machine the two threads share one CPU; Benchmarks/results/queues.md).
    private static let pollNanoseconds: UInt64 = 5_000
    private let lock = PlainLock()
    // Read and written only with `lock` held.
    private nonisolated(unsafe) var waiters = TicketQueue<Waiter>()
    /// Counts signalled for registered waiters that were not queued yet:
    /// the next to reach the lock takes one instead of queueing.
    private nonisolated(unsafe) var handedEarly = 0

    /// Creates a semaphore.
    ///
    /// - Parameter value: The starting count: 0 to order two threads, N to
    ///   let N holders at once.
    /// - Precondition: `value >= 0`.
    ///
    /// The corresponding libdispatch function is `dispatch_semaphore_create`.
    public init(value: Int) {
        precondition(value >= 0, "IOSemaphore(value:) needs a value >= 0, not \(value)")
        self.count = Atomic(value)
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
        // Nobody registered: the value rises, no lock, no system call.
        if count.wrappingAdd(1, ordering: .acquiringAndReleasing).oldValue >= 0 { return false }
        signallerCPU.store(Syscall.currentCPU(), ordering: .relaxed)
        lock.lock()
        guard let waiter = waiters.popFirst() else {
            // The waiter registered and has not queued yet: it takes this.
            handedEarly += 1
            lock.unlock()
            return true
        }
        waiter.granted = true
        waiter.ticket = -1
        if let continuation = waiter.continuation {
            waiter.continuation = nil
            lock.unlock()
            continuation.resume()
            return true
        }
        lock.unlock()
        // After the unlock: the woken thread does not wake only to wait for
        // the mutex this thread still holds. The waiter stays alive while
        // this frame holds it, so the wake never touches freed memory.
        if waiter.word!.pointee.exchange(Waiter.handedOver, ordering: .releasing) == Waiter.asleep {
            // Only a failed call (never expected) can throw: the thread
            // would then find the word changed at its next look.
            _ = try? Syscall.futexWake(waiter.futexAddress)
        }
        withExtendedLifetime(waiter) {}
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

    /// Under the lock: gives back a registered waiter's place when no signal
    /// is on its way to it. False when one is (`count` is not below 0: a
    /// count comes for every registered waiter, this one included): the
    /// waiter must then take it.
    private func withdraw() -> Bool {
        var current = count.load(ordering: .relaxed)
        while current < 0 {
            let (exchanged, original) = count.compareExchange(expected: current, desired: current + 1,
                                                              ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        return false
    }

    private func wait(untilNanoseconds deadline: UInt64?) -> Bool {
        if count.wrappingSubtract(1, ordering: .acquiringAndReleasing).oldValue > 0 { return true }
        // Readied before the lock: a signaller that comes meanwhile does not
        // wait on the mutex (and sleep on it) while this thread does it.
        let waiter = Waiter.ofThisThread()
        waiter.reset()
        lock.lock()
        if handedEarly > 0 {
            handedEarly -= 1
            lock.unlock()
            return true
        }
        if let deadline, monotonicNanoseconds() >= deadline, withdraw() {
            lock.unlock()
            return false
        }
        waiter.ticket = waiters.append(waiter)
        lock.unlock()
        // The word is the waiter's: keep it alive to the last look.
        return withExtendedLifetime(waiter) { () -> Bool in
            let word = waiter.word!
            let signaller = signallerCPU.load(ordering: .relaxed)
            if signaller >= 0, signaller != Syscall.currentCPU(), pollHandedOver(word) { return true }
            // A poll on the waiter's own CPU would take the core the
            // signaller needs (Benchmarks/results/queues.md, fourth pass:
            // 0.41–0.75× Dispatch with a 20 µs poll on a loaded machine).
            // Announce the sleep; a signal that came first left `handedOver`.
            guard word.pointee.compareExchange(expected: Waiter.queued, desired: Waiter.asleep,
                                               ordering: .acquiringAndReleasing).exchanged else { return true }
            while true {
                let notLate = (try? Syscall.futexWait(waiter.futexAddress, expected: Waiter.asleep,
                                                      untilNanoseconds: deadline)) ?? true
                if word.pointee.load(ordering: .acquiring) == Waiter.handedOver { return true }
                if !notLate, let deadline, monotonicNanoseconds() >= deadline {
                    lock.lock()
                    if waiter.granted {
                        // Granted after the deadline, before this look: keep it
                        // (the signaller's store and wake still come; the word
                        // is this frame's until then).
                        lock.unlock()
                        while word.pointee.load(ordering: .acquiring) != Waiter.handedOver {
                            _ = try? Syscall.futexWait(waiter.futexAddress, expected: Waiter.asleep, untilNanoseconds: nil)
                        }
                        return true
                    }
                    if withdraw() {
                        waiters.remove(ticket: waiter.ticket)
                        lock.unlock()
                        return false
                    }
                    // A signal is on its way to this waiter: take it.
                    lock.unlock()
                    while word.pointee.load(ordering: .acquiring) != Waiter.handedOver {
                        _ = try? Syscall.futexWait(waiter.futexAddress, expected: Waiter.asleep, untilNanoseconds: nil)
                    }
                    return true
                }
            }
        }
    }

    /// Polls a queued thread's word for up to `pollNanoseconds`: whether a
    /// signal handed it over meanwhile (acquire: what the signaller did
    /// before is visible). Stops early when the clock jumps (preempted).
    private func pollHandedOver(_ word: UnsafeMutablePointer<Atomic<UInt32>>) -> Bool {
        var now = monotonicNanoseconds()
        let deadline = now &+ IOSemaphore.pollNanoseconds
        while true {
            for _ in 0..<64 where word.pointee.load(ordering: .acquiring) == Waiter.handedOver { return true }
            let later = monotonicNanoseconds()
            if later >= deadline || later &- now > IOSemaphore.pollNanoseconds { return false }
            now = later
        }
    }

    /// Takes one, suspending the calling task (not its thread) while the
    /// value is 0.
    ///
    /// - Throws: `CancellationError` when the task is cancelled before it
    ///   took one (it takes nothing then).
    public func wait() async throws(CancellationError) {
        if count.wrappingSubtract(1, ordering: .acquiringAndReleasing).oldValue > 0 { return }
        let waiter = Waiter(thread: false)
        do {
            try await withTaskCancellationHandler {
                try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                    enum Now { case taken, cancelled, queued }
                    let now = lock.withLock { () -> Now in
                        if handedEarly > 0 {
                            handedEarly -= 1
                            return .taken
                        }
                        if waiter.cancelled && withdraw() { return .cancelled }
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
                    // Granted, not queued yet, or a signal on its way to it
                    // (it takes that one): the wait ends as it would have.
                    guard !waiter.granted, let continuation = waiter.continuation, withdraw() else { return nil }
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
