#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// The process: its ID, other processes, the system's configuration.

extension Syscall.Call {
    package static let kill = Syscall.Call("kill")
}

extension Syscall {
    /// This process's ID (never fails).
    ///
    /// The corresponding C function is `getpid`.
    ///
    /// - Returns: The ID.
    package static func getpid() -> pid_t { Glibc.getpid() }

    /// Whether a process with ID `pid` exists (a signal 0 sent to it:
    /// `EPERM` means it exists but is another user's).
    ///
    /// The corresponding C function is `kill`.
    ///
    /// - Parameter pid: The process ID.
    /// - Returns: `false` only when there is no such process (`ESRCH`).
    package static func processExists(_ pid: pid_t) -> Bool {
        do {
            _ = try retryingInterrupts(.kill) { () throws(Errno) in try valueOrErrno(Glibc.kill(pid, 0)) }
            return true
        } catch {
            return error != .noSuchProcess
        }
    }

    /// The number of processors online (at least 1).
    ///
    /// The corresponding C function is `sysconf` (`_SC_NPROCESSORS_ONLN`).
    ///
    /// - Returns: The count.
    package static func onlineProcessors() -> Int {
        Swift.max(1, Int(Glibc.sysconf(CInt(_SC_NPROCESSORS_ONLN))))
    }
}
