#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// Files: open, close, read, write, truncate, seek, sync, fcntl, ioctl (stat: Syscall+Stat.swift).
// Descriptors are `CInt`, as the library keeps them (io_uring's requests
// and its registered table take them so); swift-system's `FileDescriptor`
// is made where its call is used.

extension Syscall.Call {
    package static let open = Syscall.Call("open")
    package static let openat = Syscall.Call("openat")
    package static let openat2 = Syscall.Call("openat2")
    package static let close = Syscall.Call("close")
    package static let read = Syscall.Call("read")
    package static let pread = Syscall.Call("pread")
    package static let readv = Syscall.Call("readv")
    package static let preadv = Syscall.Call("preadv")
    package static let preadv2 = Syscall.Call("preadv2")
    package static let write = Syscall.Call("write")
    package static let pwrite = Syscall.Call("pwrite")
    package static let writev = Syscall.Call("writev")
    package static let pwritev = Syscall.Call("pwritev")
    package static let ftruncate = Syscall.Call("ftruncate")
    package static let fallocate = Syscall.Call("fallocate")
    package static let lseek = Syscall.Call("lseek")
    package static let fsync = Syscall.Call("fsync")
    package static let fdatasync = Syscall.Call("fdatasync")
    package static let fcntl = Syscall.Call("fcntl")
    package static let ioctl = Syscall.Call("ioctl")
}

// MARK: - open, close

extension Syscall {
    /// Opens `path` with `flags` (`O_RDONLY | O_CLOEXEC`, ...), creating it
    /// with `mode` where `flags` has `O_CREAT`.
    ///
    /// The corresponding C function is `openat`.
    ///
    /// - Parameters:
    ///   - path: The file, relative to `directory` unless absolute.
    ///   - directory: A directory's descriptor, or `AT_FDCWD`.
    ///   - flags: `open(2)`'s flags.
    ///   - mode: The permissions of a file it creates.
    /// - Returns: The new descriptor.
    /// - Throws: The `Errno` of the failed call.
    package static func openat(_ directory: CInt = AT_FDCWD, _ path: UnsafePointer<CChar>, flags: CInt,
                               mode: CModeT = 0) throws(Errno) -> CInt {
        try retryingInterrupts(.openat, .path(path, relativeTo: directory)) { () throws(Errno) in
            try valueOrErrno(Glibc.openat(directory, path, flags, mode))
        }
    }

    /// `openat(_:_:flags:mode:)` for a `FilePath`, relative to the working
    /// directory.
    ///
    /// The corresponding C function is `open`.
    ///
    /// - Parameters:
    ///   - path: The file.
    ///   - flags: `open(2)`'s flags.
    ///   - mode: The permissions of a file it creates.
    /// - Returns: The new descriptor.
    /// - Throws: The `Errno` of the failed call.
    package static func open(_ path: FilePath, flags: CInt, mode: CModeT = 0) throws(Errno) -> CInt {
        try withPath(path) { (p) throws(Errno) in try openat(AT_FDCWD, p, flags: flags, mode: mode) }
    }

    /// `O_PATH`: a descriptor for the name only, through which nothing is
    /// read or written, so no permission to read is needed (the constant
    /// is hidden from Swift behind `_GNU_SOURCE`).
    package static let pathOnly: CInt = 0o10000000

    /// Opens `path` only if every component of it is in the dentry cache
    /// (`RESOLVE_CACHED`, Linux 5.12): `EAGAIN` instead of a walk that might
    /// block; `ENOSYS` where the headers lack `openat2`.
    ///
    /// The corresponding C function is `openat2`.
    ///
    /// - Parameters:
    ///   - path: The file.
    ///   - flags: `open(2)`'s flags (no `O_CREAT`).
    /// - Returns: The new descriptor.
    /// - Throws: The `Errno` of the failed call.
    package static func openCached(_ path: FilePath, flags: CInt) throws(Errno) -> CInt {
        try withPath(path) { (p) throws(Errno) in
            try retryingInterrupts(.openat2, .path(p, relativeTo: AT_FDCWD)) { () throws(Errno) in
                try valueOrErrno(cliburing_open_cached(p, flags))
            }
        }
    }

    /// Closes `fd`. Never retried: on Linux the descriptor is released
    /// even when `close` fails with `EINTR`, which is therefore no failure.
    ///
    /// The corresponding C function is `close`.
    ///
    /// - Parameter fd: The descriptor.
    /// - Throws: The `Errno` of the failed call (`EIO` from a file system
    ///   that writes back on close), never `EINTR`.
    package static func close(_ fd: CInt) throws(Errno) {
        do {
            try once(.close, .fd(fd)) { () throws(Errno) in try swiftSystem { try FileDescriptor(rawValue: fd).close() } }
        } catch .interrupted {
            return
        }
    }

    /// Closes `fd`, ignoring any error (a descriptor given up on a failed
    /// path, whose close has nothing left to report).
    ///
    /// The corresponding C function is `close`.
    ///
    /// - Parameter fd: The descriptor.
    package static func closeIgnoringErrors(_ fd: CInt) {
        _ = try? close(fd)
    }
}

// MARK: - read, write

extension Syscall {
    /// Reads into `buffer` at the file position.
    ///
    /// The corresponding C function is `read`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - buffer: Where the bytes go.
    /// - Returns: How many bytes were read (0 at the end).
    /// - Throws: The `Errno` of the failed call.
    package static func read(_ fd: CInt, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try retryingInterrupts(.read, .fd(fd)) { () throws(Errno) in
            try swiftSystem { try FileDescriptor(rawValue: fd).read(into: buffer, retryOnInterrupt: false) }
        }
    }

    /// Reads into `buffer` at `offset`, leaving the file position alone.
    ///
    /// The corresponding C function is `pread`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - buffer: Where the bytes go.
    ///   - offset: Where in the file.
    /// - Returns: How many bytes were read (0 at the end).
    /// - Throws: The `Errno` of the failed call.
    package static func pread(_ fd: CInt, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(Errno) -> Int {
        try retryingInterrupts(.pread, .fd(fd)) { () throws(Errno) in
            try swiftSystem { try FileDescriptor(rawValue: fd).read(fromAbsoluteOffset: offset, into: buffer, retryOnInterrupt: false) }
        }
    }

    /// Reads into `buffer` at `offset` only what is in the page cache
    /// (`RWF_NOWAIT`): `EAGAIN`, or fewer bytes, instead of waiting for the
    /// disk.
    ///
    /// The corresponding C function is `preadv2`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - buffer: Where the bytes go.
    ///   - offset: Where in the file.
    /// - Returns: How many bytes were read.
    /// - Throws: The `Errno` of the failed call.
    package static func preadNowait(_ fd: CInt, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(Errno) -> Int {
        try retryingInterrupts(.preadv2, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(cliburing_pread_nowait(fd, buffer.baseAddress, buffer.count, offset))
        }
    }

    /// Reads into `count` buffers, at `offset` (or at the file position
    /// when `offset` is negative).
    ///
    /// The corresponding C functions are `preadv` and `readv`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - iovecs: The buffers.
    ///   - count: How many.
    ///   - offset: Where in the file; negative: the file position.
    /// - Returns: How many bytes were read.
    /// - Throws: The `Errno` of the failed call.
    package static func preadv(_ fd: CInt, _ iovecs: UnsafePointer<iovec>, count: Int, at offset: Int64) throws(Errno) -> Int {
        try retryingInterrupts(offset < 0 ? .readv : .preadv, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(offset < 0 ? Glibc.readv(fd, iovecs, CInt(count)) : Glibc.preadv(fd, iovecs, CInt(count), off_t(offset)))
        }
    }

    /// Writes `buffer` at the file position.
    ///
    /// The corresponding C function is `write`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - buffer: The bytes.
    /// - Returns: How many were written.
    /// - Throws: The `Errno` of the failed call.
    package static func write(_ fd: CInt, from buffer: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try retryingInterrupts(.write, .fd(fd)) { () throws(Errno) in
            try swiftSystem { try FileDescriptor(rawValue: fd).write(buffer, retryOnInterrupt: false) }
        }
    }

    /// Writes `buffer` at `offset`, leaving the file position alone.
    ///
    /// The corresponding C function is `pwrite`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - buffer: The bytes.
    ///   - offset: Where in the file.
    /// - Returns: How many were written.
    /// - Throws: The `Errno` of the failed call.
    package static func pwrite(_ fd: CInt, from buffer: UnsafeRawBufferPointer, at offset: Int64) throws(Errno) -> Int {
        try retryingInterrupts(.pwrite, .fd(fd)) { () throws(Errno) in
            try swiftSystem { try FileDescriptor(rawValue: fd).write(toAbsoluteOffset: offset, buffer, retryOnInterrupt: false) }
        }
    }

    /// Writes `count` buffers at `offset` (or at the file position when
    /// `offset` is negative).
    ///
    /// The corresponding C functions are `pwritev` and `writev`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - iovecs: The buffers.
    ///   - count: How many.
    ///   - offset: Where in the file; negative: the file position.
    /// - Returns: How many bytes were written.
    /// - Throws: The `Errno` of the failed call.
    package static func pwritev(_ fd: CInt, _ iovecs: UnsafePointer<iovec>, count: Int, at offset: Int64) throws(Errno) -> Int {
        try retryingInterrupts(offset < 0 ? .writev : .pwritev, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(offset < 0 ? Glibc.writev(fd, iovecs, CInt(count)) : Glibc.pwritev(fd, iovecs, CInt(count), off_t(offset)))
        }
    }
}

// MARK: - size, position, sync, flags

extension Syscall {
    /// Sets the size of the file to `size` bytes.
    ///
    /// The corresponding C function is `ftruncate`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor (open for writing).
    ///   - size: The new size.
    /// - Throws: The `Errno` of the failed call.
    package static func ftruncate(_ fd: CInt, to size: Int64) throws(Errno) {
        try retryingInterrupts(.ftruncate, .fd(fd)) { () throws(Errno) in
            try swiftSystem { try FileDescriptor(rawValue: fd).resize(to: size, retryOnInterrupt: false) }
        }
    }

    /// Allocates `length` bytes at `offset` (`mode` 0: they read as zeros
    /// and the size grows to cover them).
    ///
    /// The corresponding C function is `fallocate`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - mode: `FALLOC_FL_*` flags; 0 allocates.
    ///   - offset: Where.
    ///   - length: How many bytes.
    /// - Throws: The `Errno` of the failed call (`ENOSPC`, `EOPNOTSUPP`).
    package static func fallocate(_ fd: CInt, mode: CInt = 0, offset: Int64, length: Int64) throws(Errno) {
        _ = try retryingInterrupts(.fallocate, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(cliburing_fallocate(fd, mode, offset, length))
        }
    }

    /// Moves the file position (or finds data and holes: `SEEK_DATA`,
    /// `SEEK_HOLE`).
    ///
    /// The corresponding C function is `lseek`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - offset: The offset from `whence`.
    ///   - whence: `SEEK_SET`, `SEEK_CUR`, `SEEK_END`, `SEEK_DATA` or `SEEK_HOLE`.
    /// - Returns: The resulting offset from the start.
    /// - Throws: The `Errno` of the failed call (`ENXIO`: no data after `offset`).
    @discardableResult
    package static func lseek(_ fd: CInt, _ offset: Int64, _ whence: CInt) throws(Errno) -> Int64 {
        try retryingInterrupts(.lseek, .fd(fd)) { () throws(Errno) in
            try swiftSystem { try FileDescriptor(rawValue: fd).seek(offset: offset, from: FileDescriptor.SeekOrigin(rawValue: whence)) }
        }
    }

    /// Writes the file's data (and with `dataOnly` false its metadata) to
    /// the device.
    ///
    /// The corresponding C functions are `fsync` and `fdatasync`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - dataOnly: `fdatasync` (only the metadata a read needs).
    /// - Throws: The `Errno` of the failed call.
    package static func fsync(_ fd: CInt, dataOnly: Bool = false) throws(Errno) {
        _ = try retryingInterrupts(dataOnly ? .fdatasync : .fsync, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(dataOnly ? Glibc.fdatasync(fd) : Glibc.fsync(fd))
        }
    }

    /// A descriptor's command without an argument (`F_GETFL`, `F_GETPIPE_SZ`).
    ///
    /// The corresponding C function is `fcntl`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - command: The `F_*` command.
    /// - Returns: What it returned.
    /// - Throws: The `Errno` of the failed call.
    @discardableResult
    package static func fcntl(_ fd: CInt, _ command: CInt) throws(Errno) -> CInt {
        try retryingInterrupts(.fcntl, .fd(fd)) { () throws(Errno) in try valueOrErrno(Glibc.fcntl(fd, command)) }
    }

    /// A descriptor's command with an integer argument (`F_SETFL`,
    /// `F_DUPFD_CLOEXEC`).
    ///
    /// The corresponding C function is `fcntl`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - command: The `F_*` command.
    ///   - value: Its argument.
    /// - Returns: What it returned.
    /// - Throws: The `Errno` of the failed call.
    @discardableResult
    package static func fcntl(_ fd: CInt, _ command: CInt, _ value: CInt) throws(Errno) -> CInt {
        try retryingInterrupts(.fcntl, .fd(fd)) { () throws(Errno) in try valueOrErrno(Glibc.fcntl(fd, command, value)) }
    }

    /// Makes `destination` share `source`'s blocks (a reflink, on btrfs or
    /// XFS): `EOPNOTSUPP`, `EXDEV` or `EINVAL` where it cannot.
    ///
    /// The corresponding C function is `ioctl` (`FICLONE`).
    ///
    /// - Parameters:
    ///   - destination: The file to make a clone (open for writing).
    ///   - source: The file it clones.
    /// - Throws: The `Errno` of the failed call.
    package static func ficlone(_ destination: CInt, from source: CInt) throws(Errno) {
        // FICLONE is _IOW(0x94, 9, int).
        let ficlone = UInt(0x4004_9409)
        _ = try retryingInterrupts(.ioctl, .fds(source, destination)) { () throws(Errno) in
            try valueOrErrno(Glibc.ioctl(destination, ficlone, source))
        }
    }

    /// The logical block size of a block device (what `O_DIRECT` aligns to).
    ///
    /// The corresponding C function is `ioctl` (`BLKSSZGET`).
    ///
    /// - Parameter fd: The block device's descriptor.
    /// - Returns: The size in bytes.
    /// - Throws: The `Errno` of the failed call.
    package static func logicalBlockSize(_ fd: CInt) throws(Errno) -> Int {
        Int(try retryingInterrupts(.ioctl, .fd(fd)) { () throws(Errno) in try valueOrNegatedErrno(cliburing_logical_block_size(fd)) })
    }
}
