#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import Synchronization

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
    package static let epollCreate = Syscall.Call("epoll_create1")
    package static let epollControl = Syscall.Call("epoll_ctl")
    package static let epollWait = Syscall.Call("epoll_wait")
    package static let epollWaitNanoseconds = Syscall.Call("epoll_pwait2")
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

extension Syscall {
    /// Creates (`fd` -1) or updates a signalfd for `mask`: non-blocking,
    /// close-on-exec.
    ///
    /// The corresponding C function is `signalfd`.
    ///
    /// - Parameters:
    ///   - fd: -1 for a new one, or the signalfd to update.
    ///   - mask: The signals it reports.
    /// - Returns: The signalfd.
    /// - Throws: `Errno` (`EMFILE`, `ENFILE`, `ENOMEM`).
    package static func signalfd(_ fd: CInt, _ mask: inout sigset_t) throws(Errno) -> CInt {
        try once(.signalfd, fd >= 0 ? .fd(fd) : .none) { () throws(Errno) in
            try valueOrErrno(CLiburing.signalfd(fd, &mask, CInt(SFD_NONBLOCK | SFD_CLOEXEC)))
        }
    }

    /// Installs the library's forwarding action for `signal`: a signal that
    /// lands on a thread which does not block it is sent on, with
    /// `tgkill`, to thread `tid` (the engine thread that reads the
    /// signalfd, which blocks it, so that it stays pending there until the
    /// read).
    ///
    /// The corresponding C function is `sigaction`.
    ///
    /// - Parameters:
    ///   - signal: The signal.
    ///   - tid: The thread that reads the signalfd.
    ///   - old: Receives the action it replaces.
    /// - Throws: `Errno.invalidArgument` for SIGKILL, SIGSTOP or a number out of range.
    package static func forwardSignal(_ signal: CInt, to tid: CInt, saving old: inout sigaction) throws(Errno) {
        guard signal > 0, signal < 65 else { throw .invalidArgument }
        signalForwardTable[Int(signal)].store(tid, ordering: .releasing)
        _ = try once(.sigaction) { () throws(Errno) in
            try valueOrNegatedErrno(cliburing_install_handler(signal, { sig in
                // A signal handler: one atomic load and one system call
                // (no lock, no allocation: async-signal-safe).
                guard sig > 0, sig < 65 else { return }
                let tid = signalForwardTable[Int(sig)].load(ordering: .acquiring)
                if tid > 0 { _ = cliburing_tgkill(tid, sig) }
            }, &old))
        }
    }

    /// Puts back the action of `signal` that `forwardSignal` replaced.
    ///
    /// The corresponding C function is `sigaction`.
    ///
    /// - Parameters:
    ///   - signal: The signal.
    ///   - old: The action to restore.
    package static func restoreSignal(_ signal: CInt, _ old: inout sigaction) {
        guard signal > 0, signal < 65 else { return }
        _ = cliburing_restore_action(signal, &old)
        signalForwardTable[Int(signal)].store(0, ordering: .releasing)
    }

    /// Blocks `signal` in the calling thread.
    ///
    /// The corresponding C function is `pthread_sigmask` (`SIG_BLOCK`).
    ///
    /// - Parameter signal: The signal.
    package static func blockSignalOnThisThread(_ signal: CInt) {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signal)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// An fd that becomes readable when process `pid` ends.
    ///
    /// The corresponding C function is `pidfd_open` (Linux 5.3).
    ///
    /// - Parameter pid: The process.
    /// - Returns: The pidfd (close-on-exec).
    /// - Throws: `Errno` (`ESRCH`: no such process, or already reaped).
    package static func pidfdOpen(_ pid: pid_t) throws(Errno) -> CInt {
        try once(.pidfdOpen) { () throws(Errno) in try valueOrNegatedErrno(cliburing_pidfd_open(pid)) }
    }

    /// The raw wait status of the ended child behind `pidfd`, left unreaped.
    ///
    /// The corresponding C function is `waitid` (`P_PIDFD`, `WEXITED |
    /// WNOHANG | WNOWAIT`).
    ///
    /// - Parameter pidfd: The pidfd.
    /// - Returns: The status (decode it with the `W*` macros).
    /// - Throws: `Errno` (`ECHILD` for a process that is not our child,
    ///   `EAGAIN` when it has not ended).
    package static func waitStatus(pidfd: CInt) throws(Errno) -> CInt {
        try once(.waitid, .fd(pidfd)) { () throws(Errno) in try valueOrNegatedErrno(cliburing_pidfd_wait_status(pidfd)) }
    }
}

/// The thread each signal is forwarded to (0: none), one atomic per signal
/// number, stored by the thread that installs or removes the forwarding and
/// loaded by the forwarding handler: a lock-free atomic load is
/// async-signal-safe, where a lock or an allocation in the handler is not.
/// `nonisolated(unsafe)`: the pointer itself never changes after its
/// initialization (which runs at the first `forwardSignal`, before any
/// handler that reads it is installed); every access to the pointees is
/// atomic.
nonisolated(unsafe) private let signalForwardTable: UnsafeMutablePointer<Atomic<Int32>> = {
    let table = UnsafeMutablePointer<Atomic<Int32>>.allocate(capacity: 65)
    for i in 0..<65 { (table + i).initialize(to: Atomic(0)) }
    return table
}()

extension Syscall {
    /// A new inotify instance: non-blocking, close-on-exec.
    ///
    /// The corresponding C function is `inotify_init1`.
    ///
    /// - Returns: Its fd.
    /// - Throws: `Errno` (`EMFILE`: `/proc/sys/fs/inotify/max_user_instances` reached).
    package static func inotifyInit() throws(Errno) -> CInt {
        try once(.inotifyInit) { () throws(Errno) in
            try valueOrErrno(CLiburing.inotify_init1(CInt(IN_NONBLOCK | IN_CLOEXEC)))
        }
    }

    /// Watches the file open as `fd` (through `/proc/self/fd/N`, so the
    /// watch follows the open file, not a path).
    ///
    /// The corresponding C function is `inotify_add_watch`.
    ///
    /// - Parameters:
    ///   - inotify: The inotify fd.
    ///   - fd: The open file to watch.
    ///   - mask: The `IN_*` events.
    /// - Returns: The watch descriptor (the same one for the same file).
    /// - Throws: `Errno` (`ENOSPC`: `/proc/sys/fs/inotify/max_user_watches`
    ///   reached; `EBADF`/`ENOENT` for a closed fd).
    package static func inotifyAddWatch(_ inotify: CInt, fd: CInt, mask: UInt32) throws(Errno) -> CInt {
        try once(.inotifyAddWatch, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(CLiburing.inotify_add_watch(inotify, "/proc/self/fd/\(fd)", mask))
        }
    }

    /// Removes watch `wd`, ignoring the result (the file may be gone).
    ///
    /// The corresponding C function is `inotify_rm_watch`.
    package static func inotifyRemoveWatch(_ inotify: CInt, _ wd: CInt) {
        _ = CLiburing.inotify_rm_watch(inotify, wd)
    }

    /// A new epoll instance (close-on-exec).
    ///
    /// The corresponding C function is `epoll_create1`.
    ///
    /// - Returns: Its descriptor.
    /// - Throws: The `Errno` of the failed call (`EMFILE`).
    package static func epollCreate() throws(Errno) -> CInt {
        try retryingInterrupts(.epollCreate) { () throws(Errno) in try valueOrNegatedErrno(cliburing_epoll_create()) }
    }

    /// The `epoll_ctl` operations.
    package enum EpollOperation {
        case add, modify, delete
        var raw: CInt {
            switch self {
            case .add: cliburing_epoll_ctl_add()
            case .modify: cliburing_epoll_ctl_mod()
            case .delete: cliburing_epoll_ctl_del()
            }
        }
    }

    /// `EPOLLONESHOT`: the entry reports one readiness, then waits for a modify.
    package static var epollOneShot: UInt32 { cliburing_epolloneshot() }
    /// `EPOLLIN`.
    package static var epollIn: UInt32 { cliburing_epollin() }

    /// Adds, changes or removes `fd`'s entry in epoll instance `epfd`.
    ///
    /// The corresponding C function is `epoll_ctl`.
    ///
    /// - Parameters:
    ///   - epfd: The epoll instance.
    ///   - operation: What to do.
    ///   - fd: The watched descriptor.
    ///   - events: `EPOLLIN` (`POLLIN`), `EPOLLOUT` (`POLLOUT`), `epollOneShot`.
    ///   - data: What `epollWait` reports with its events.
    /// - Throws: The `Errno` of the failed call (`ENOENT`, `EEXIST`, `EPERM`: a regular file).
    package static func epollControl(_ epfd: CInt, _ operation: EpollOperation, _ fd: CInt,
                                     events: UInt32, data: UInt64) throws(Errno) {
        _ = try retryingInterrupts(.epollControl, .fd(fd)) { () throws(Errno) in
            try valueOrNegatedErrno(cliburing_epoll_ctl(epfd, operation.raw, fd, events, data))
        }
    }

    /// Waits up to `timeout` milliseconds (-1: without end, 0: not at all)
    /// for ready entries of `epfd` (at most 64). An interrupted wait returns 0.
    ///
    /// The corresponding C function is `epoll_wait`.
    ///
    /// - Parameters:
    ///   - epfd: The epoll instance.
    ///   - data: Filled with the ready entries' data.
    ///   - events: Filled with their events (as many as `data`).
    ///   - timeout: Milliseconds, or -1.
    /// - Returns: How many are ready.
    /// - Throws: The `Errno` of the failed call.
    package static func epollWait(_ epfd: CInt, data: UnsafeMutableBufferPointer<UInt64>,
                                  events: UnsafeMutableBufferPointer<UInt32>, timeout: CInt) throws(Errno) -> Int {
        do throws(Errno) {
            return Int(try once(.epollWait, .fd(epfd)) { () throws(Errno) in
                try valueOrNegatedErrno(cliburing_epoll_wait(epfd, data.baseAddress, events.baseAddress,
                                                             CInt(Swift.min(data.count, events.count)), timeout))
            })
        } catch .interrupted {
            return 0
        }
    }

    /// Set once `epoll_pwait2` returned `ENOSYS` (a kernel before 5.11).
    private static let noEpollPwait2 = Atomic<Bool>(false)

    /// Whether `epollWait(_:data:events:timeoutNanoseconds:)` waits to the
    /// nanosecond (false once the kernel refused `epoll_pwait2`).
    package static var epollWaitTakesNanoseconds: Bool { !noEpollPwait2.load(ordering: .relaxed) }

    /// Waits up to `timeoutNanoseconds` (-1: without end, 0: not at all) for
    /// ready entries of `epfd` (at most 64): `epoll_pwait2`'s nanosecond
    /// timeout where the kernel has it (5.11), else `epoll_wait`'s
    /// milliseconds, rounded up (never early). An interrupted wait returns 0.
    ///
    /// The corresponding C functions are `epoll_pwait2` and `epoll_wait`.
    ///
    /// - Parameters:
    ///   - epfd: The epoll instance.
    ///   - data: Filled with the ready entries' data.
    ///   - events: Filled with their events (as many as `data`).
    ///   - timeoutNanoseconds: Nanoseconds, or -1.
    /// - Returns: How many are ready.
    /// - Throws: The `Errno` of the failed call.
    package static func epollWait(_ epfd: CInt, data: UnsafeMutableBufferPointer<UInt64>,
                                  events: UnsafeMutableBufferPointer<UInt32>,
                                  timeoutNanoseconds: Int64) throws(Errno) -> Int {
        if timeoutNanoseconds > 0 && !noEpollPwait2.load(ordering: .relaxed) {
            do throws(Errno) {
                return Int(try once(.epollWaitNanoseconds, .fd(epfd)) { () throws(Errno) in
                    try valueOrNegatedErrno(cliburing_epoll_pwait2(epfd, data.baseAddress, events.baseAddress,
                                                                   CInt(Swift.min(data.count, events.count)),
                                                                   timeoutNanoseconds))
                })
            } catch .interrupted {
                return 0
            } catch .noFunction {
                noEpollPwait2.store(true, ordering: .relaxed)
            }
        }
        let milliseconds = timeoutNanoseconds < 0 ? -1
            : CInt(clamping: (timeoutNanoseconds + 999_999) / 1_000_000)
        return try epollWait(epfd, data: data, events: events, timeout: milliseconds)
    }
}
