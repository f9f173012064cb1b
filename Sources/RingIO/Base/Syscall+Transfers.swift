#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// In-kernel copies and the descriptors they use: pipe2, splice,
// copy_file_range; poll, eventfd, send.

extension Syscall.Call {
    package static let pipe2 = Syscall.Call("pipe2")
    package static let splice = Syscall.Call("splice")
    package static let copyFileRange = Syscall.Call("copy_file_range")
    package static let poll = Syscall.Call("poll")
    package static let eventfd = Syscall.Call("eventfd")
    package static let send = Syscall.Call("send")
}

extension Syscall {
    /// A close-on-exec pipe whose capacity is `size` where the system
    /// allows it (`F_SETPIPE_SZ`; an unprivileged process is capped by
    /// `/proc/sys/fs/pipe-max-size`), else what it has.
    ///
    /// The corresponding C functions are `pipe2` and `fcntl`.
    ///
    /// - Parameter size: The capacity wanted, in bytes.
    /// - Returns: The read end, the write end, and the capacity they have.
    /// - Throws: The `Errno` of the failed `pipe2`.
    package static func pipe(capacity size: Int) throws(Errno) -> (read: CInt, write: CInt, capacity: Int) {
        var fds: [CInt] = [-1, -1]
        let capacity = try retryingInterrupts(.pipe2) { () throws(Errno) in
            try valueOrNegatedErrno(cliburing_sized_pipe(&fds, CInt(clamping: size)))
        }
        return (fds[0], fds[1], Int(capacity))
    }

    /// Moves up to `length` bytes from `input` to `output`, one of which is
    /// a pipe, inside the kernel.
    ///
    /// The corresponding C function is `splice`.
    ///
    /// - Parameters:
    ///   - input: The descriptor read from.
    ///   - inputOffset: Where in it (a file), or `nil`: its position (a pipe).
    ///   - output: The descriptor written to.
    ///   - outputOffset: Where in it, or `nil`.
    ///   - length: At most this many bytes.
    ///   - flags: `SPLICE_F_*` flags.
    /// - Returns: How many bytes moved (0: the input ended).
    /// - Throws: The `Errno` of the failed call.
    package static func splice(from input: CInt, at inputOffset: Int64?, to output: CInt, at outputOffset: Int64?,
                               length: Int, flags: UInt32 = 0) throws(Errno) -> Int {
        try retryingInterrupts(.splice, .fds(input, output)) { () throws(Errno) in
            var inOffset = inputOffset ?? 0, outOffset = outputOffset ?? 0
            return try withUnsafeMutablePointer(to: &inOffset) { (i) throws(Errno) in
                try withUnsafeMutablePointer(to: &outOffset) { (o) throws(Errno) in
                    try valueOrErrno(cliburing_splice(input, inputOffset == nil ? nil : i,
                                                      output, outputOffset == nil ? nil : o, length, flags))
                }
            }
        }
    }

    /// `copy_file_range(2)`, from the C library (the Glibc module leaves it
    /// out); `nil` where the C library has none.
    private typealias CopyFileRange = @convention(c) (CInt, UnsafeMutablePointer<Int64>?, CInt,
                                                      UnsafeMutablePointer<Int64>?, Int, UInt32) -> Int
    private static let copyFileRangeFunction: CopyFileRange? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "copy_file_range") else { return nil }
        return unsafeBitCast(symbol, to: CopyFileRange.self)
    }()

    /// Copies up to `length` bytes from `input` at `inputOffset` to
    /// `output` at `outputOffset` inside the kernel (which may reflink).
    ///
    /// The corresponding C function is `copy_file_range`.
    ///
    /// - Parameters:
    ///   - input: The source's descriptor.
    ///   - inputOffset: Where in the source.
    ///   - output: The destination's descriptor.
    ///   - outputOffset: Where in the destination.
    ///   - length: At most this many bytes.
    /// - Returns: How many bytes were copied (0: the source ended).
    /// - Throws: The `Errno` of the failed call (`EXDEV`, `EINVAL`,
    ///   `EOPNOTSUPP`: not between these files; `ENOSYS` also where the C
    ///   library lacks the function).
    package static func copyFileRange(from input: CInt, at inputOffset: Int64, to output: CInt, at outputOffset: Int64,
                                      length: Int) throws(Errno) -> Int {
        try retryingInterrupts(.copyFileRange, .fds(input, output)) { () throws(Errno) in
            guard let function = copyFileRangeFunction else { throw .noFunction }
            var inOffset = inputOffset, outOffset = outputOffset
            return try valueOrErrno(function(input, &inOffset, output, &outOffset, length, 0))
        }
    }

    /// Waits until one of `fds` is ready (`timeout` milliseconds, -1: no limit).
    ///
    /// The corresponding C function is `poll`.
    ///
    /// - Parameters:
    ///   - fds: The descriptors and events; `revents` is filled in.
    ///   - timeout: Milliseconds, or -1.
    /// - Returns: How many are ready.
    /// - Throws: The `Errno` of the failed call.
    @discardableResult
    package static func poll(_ fds: UnsafeMutableBufferPointer<pollfd>, timeout: CInt = -1) throws(Errno) -> Int {
        Int(try retryingInterrupts(.poll, .fd(fds.first?.fd ?? -1)) { () throws(Errno) in
            try valueOrErrno(Glibc.poll(fds.baseAddress, nfds_t(fds.count), timeout))
        })
    }

    /// A new event counter's descriptor (written to wake, read to reset).
    ///
    /// The corresponding C function is `eventfd`.
    ///
    /// - Parameters:
    ///   - initialValue: Its count.
    ///   - flags: `EFD_CLOEXEC`, `EFD_NONBLOCK`.
    /// - Returns: The descriptor.
    /// - Throws: The `Errno` of the failed call (`EMFILE`).
    package static func eventfd(initialValue: UInt32 = 0, flags: CInt) throws(Errno) -> CInt {
        try retryingInterrupts(.eventfd) { () throws(Errno) in try valueOrErrno(CLiburing.eventfd(initialValue, flags)) }
    }

    /// Sends `count` bytes on a socket.
    ///
    /// The corresponding C function is `send`.
    ///
    /// - Parameters:
    ///   - fd: The socket.
    ///   - base: The bytes.
    ///   - count: How many.
    ///   - flags: `MSG_*` flags.
    /// - Returns: How many were sent.
    /// - Throws: The `Errno` of the failed call (`ENOTSOCK`: not a socket).
    package static func send(_ fd: CInt, _ base: UnsafeRawPointer?, count: Int, flags: CInt) throws(Errno) -> Int {
        try retryingInterrupts(.send, .fd(fd)) { () throws(Errno) in try valueOrErrno(Glibc.send(fd, base, count, flags)) }
    }
}
