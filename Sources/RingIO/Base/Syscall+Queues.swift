#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// The queues: which thread is the main one; the futex a waiting thread sleeps on.

extension Syscall.Call {
    package static let futexWait = Syscall.Call("futex_wait")
    package static let futexWake = Syscall.Call("futex_wake")
    package static let setTimerSlack = Syscall.Call("prctl")
}

extension Syscall {
    /// The calling thread's kernel thread ID (never fails).
    ///
    /// The corresponding C function is `gettid`.
    ///
    /// - Returns: The ID; the process ID on the process's main thread.
    package static func gettid() -> pid_t { pid_t(cliburing_gettid()) }

    /// Whether the calling thread is the process's main thread (the one that
    /// ran `main`): its thread ID is the process ID.
    ///
    /// The corresponding C functions are `gettid` and `getpid`.
    ///
    /// - Returns: `true` on the main thread.
    package static func isMainThread() -> Bool { gettid() == getpid() }

    /// The CPU the calling thread runs on now (a hint: it may move at once),
    /// or -1 when unknown (never fails; glibc reads it from the thread's
    /// rseq area, with no system call, where the kernel registered one).
    ///
    /// The corresponding C function is `sched_getcpu`.
    ///
    /// - Returns: The CPU's number, or -1.
    package static func currentCPU() -> Int { Int(cliburing_current_cpu()) }
}

extension Syscall {
    /// Sleeps while the 32-bit word at `word` holds `expected`, until
    /// `futexWake` on the same word, a spurious wake-up, or `deadline`.
    ///
    /// Private to the process (`FUTEX_PRIVATE_FLAG`); the deadline is
    /// absolute CLOCK_MONOTONIC (`FUTEX_WAIT_BITSET`), so a retry after
    /// `EINTR` does not lengthen the wait. The futex orders nothing for
    /// ThreadSanitizer: the caller reads and writes the word with
    /// acquire/release atomics.
    ///
    /// The corresponding C function is `futex` (`FUTEX_WAIT_BITSET`).
    ///
    /// - Parameters:
    ///   - word: The word (an `Atomic<UInt32>`'s storage).
    ///   - expected: The value to sleep on.
    ///   - deadline: CLOCK_MONOTONIC nanoseconds; `nil`: no deadline.
    /// - Returns: `false` when the deadline passed; `true` otherwise (woken,
    ///   or the word no longer held `expected`; the caller looks again).
    /// - Throws: The `Errno` of a failed call (not `EAGAIN`, `ETIMEDOUT`
    ///   or `EINTR`).
    package static func futexWait(_ word: UnsafeMutablePointer<UInt32>, expected: UInt32,
                                  untilNanoseconds deadline: UInt64?) throws(Errno) -> Bool {
        try retryingInterrupts(.futexWait) { () throws(Errno) -> Bool in
            do throws(Errno) {
                if let deadline {
                    var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
                    _ = try valueOrErrno(cliburing_futex_wait(word, expected, &ts))
                } else {
                    _ = try valueOrErrno(cliburing_futex_wait(word, expected, nil))
                }
                return true
            } catch .resourceTemporarilyUnavailable {
                return true
            } catch .timedOut {
                return false
            }
        }
    }

    /// Wakes up to `count` threads asleep in `futexWait` on `word`.
    ///
    /// The corresponding C function is `futex` (`FUTEX_WAKE`).
    ///
    /// - Parameters:
    ///   - word: The word the sleepers wait on.
    ///   - count: The most threads to wake.
    /// - Returns: How many it woke.
    /// - Throws: The `Errno` of a failed call.
    @discardableResult
    package static func futexWake(_ word: UnsafeMutablePointer<UInt32>, count: CInt = 1) throws(Errno) -> Int {
        Int(try retryingInterrupts(.futexWake) { () throws(Errno) in try valueOrErrno(cliburing_futex_wake(word, count)) })
    }

    /// Sets how late the kernel may end the calling thread's timed sleeps
    /// (a condition or futex wait with a deadline) to batch wake-ups with
    /// others: 50 µs by default, which a thread that sleeps until a timer's
    /// deadline would add to the timer's lateness.
    ///
    /// The corresponding C function is `prctl` (`PR_SET_TIMERSLACK`).
    ///
    /// - Parameter nanoseconds: The slack; 0 restores the default.
    /// - Throws: The `Errno` of a failed call.
    package static func setTimerSlack(nanoseconds: UInt) throws(Errno) {
        _ = try retryingInterrupts(.setTimerSlack) { () throws(Errno) in
            try valueOrErrno(cliburing_set_timer_slack(nanoseconds))
        }
    }
}
