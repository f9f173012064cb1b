#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// The process: its ID, other processes, the system's configuration, memory maps.

extension Syscall.Call {
    package static let kill = Syscall.Call("kill")
    package static let getrlimit = Syscall.Call("getrlimit")
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

    /// The soft limit on open file descriptors (`RLIMIT_NOFILE`):
    /// `rlim_t.max` for no limit.
    ///
    /// The corresponding C function is `getrlimit`.
    ///
    /// - Returns: The soft limit.
    /// - Throws: The `Errno` of the failed call.
    package static func openFileLimit() throws(Errno) -> UInt64 {
        try retryingInterrupts(.getrlimit) { () throws(Errno) in
            var limit = rlimit()
            _ = try valueOrErrno(Glibc.getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit))
            return UInt64(limit.rlim_cur)
        }
    }

    /// Unmaps `count` bytes at `base` (a mapping the library made, or was
    /// given with `.unmap`); a failure (a range that was not mapped) is
    /// ignored, as nothing can be done about it.
    ///
    /// The corresponding C function is `munmap`.
    ///
    /// - Parameters:
    ///   - base: The mapping's start.
    ///   - count: Its length in bytes.
    package static func munmap(_ base: UnsafeMutableRawPointer, count: Int) {
        _ = Glibc.munmap(base, count)
    }
}
