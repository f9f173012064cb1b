#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing

// The queues: which thread is the main one.

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
}
