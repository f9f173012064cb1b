#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// The dispatch sources' calls: readiness checks and estimates, signal
// masks and signalfd, inotify, pidfd and waitid.

extension Syscall.Call {
    package static let pollNow = Syscall.Call("poll")
    package static let bytesReadable = Syscall.Call("ioctl(FIONREAD)")
    package static let pipeCapacity = Syscall.Call("fcntl(F_GETPIPE_SZ)")
    package static let fileStatusFlags = Syscall.Call("fcntl(F_GETFL)")
    package static let signalfd = Syscall.Call("signalfd")
    package static let sigaction = Syscall.Call("sigaction")
    package static let inotifyInit = Syscall.Call("inotify_init1")
    package static let inotifyAddWatch = Syscall.Call("inotify_add_watch")
    package static let pidfdOpen = Syscall.Call("pidfd_open")
    package static let waitid = Syscall.Call("waitid")
}

extension Syscall {
    /// The events of `events` that `fd` is ready for now, without waiting;
    /// `POLLNVAL` when `fd` is not open.
    ///
    /// The corresponding C function is `poll` (timeout 0).
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - events: `POLLIN`, `POLLOUT`, ...
    /// - Returns: The ready events (0: none).
    package static func readyEvents(_ fd: CInt, _ events: Int16) -> Int16 {
        var p = pollfd(fd: fd, events: events, revents: 0)
        let n = (try? retryingInterrupts(.pollNow, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(Glibc.poll(&p, 1, 0))
        }) ?? 0
        return n > 0 ? p.revents : 0
    }

    /// The bytes ready to read on `fd`.
    ///
    /// The corresponding C function is `ioctl` (`FIONREAD`).
    ///
    /// - Parameter fd: The descriptor.
    /// - Returns: The count.
    /// - Throws: `Errno` (`ENOTTY` where the file has no such count).
    package static func bytesReadable(_ fd: CInt) throws(Errno) -> Int {
        try Int(once(.bytesReadable, .fd(fd)) { () throws(Errno) in try valueOrNegatedErrno(cliburing_bytes_readable(fd)) })
    }

    /// The capacity of the pipe whose end `fd` is.
    ///
    /// The corresponding C function is `fcntl` (`F_GETPIPE_SZ`).
    ///
    /// - Parameter fd: The descriptor.
    /// - Returns: The capacity in bytes.
    /// - Throws: `Errno` (`EBADF` for a descriptor that is no pipe).
    package static func pipeCapacity(_ fd: CInt) throws(Errno) -> Int {
        try Int(once(.pipeCapacity, .fd(fd)) { () throws(Errno) in try valueOrNegatedErrno(cliburing_pipe_capacity(fd)) })
    }

    /// Checks that `fd` is open.
    ///
    /// The corresponding C function is `fcntl` (`F_GETFL`).
    ///
    /// - Parameter fd: The descriptor.
    /// - Throws: `Errno.badFileDescriptor` when it is not.
    package static func checkOpen(_ fd: CInt) throws(Errno) {
        _ = try once(.fileStatusFlags, .fd(fd)) { () throws(Errno) in try valueOrErrno(Glibc.fcntl(fd, F_GETFL)) }
    }
}
