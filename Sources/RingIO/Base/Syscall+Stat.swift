#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// A file's status: fstat, stat, lstat, statx, fstatfs, as swift-system's
// `Stat` where it has the call; `FileType(mode:)` for a raw mode.

extension Syscall.Call {
    package static let fstat = Syscall.Call("fstat")
    package static let stat = Syscall.Call("stat")
    package static let lstat = Syscall.Call("lstat")
    package static let fstatat = Syscall.Call("fstatat")
    package static let statx = Syscall.Call("statx")
    package static let fstatfs = Syscall.Call("fstatfs")
}

extension FileType {
    /// The type in a raw `st_mode` or `stx_mode` (`S_IFMT`'s bits): the
    /// one place where the library reads them (swift-system's `Stat.type`
    /// does the same for a `Stat`).
    ///
    /// - Parameter mode: A file's mode, type bits and permissions.
    package init(mode: CModeT) { self.init(rawValue: mode & S_IFMT) }
}

extension Syscall {
    /// The status of an open file.
    ///
    /// The corresponding C function is `fstat`.
    ///
    /// - Parameter fd: The descriptor.
    /// - Returns: Its status (`.type`, `.size`, `.inode`, ...).
    /// - Throws: The `Errno` of the failed call.
    package static func fstat(_ fd: CInt) throws(Errno) -> Stat {
        try retryingInterrupts(.fstat, .fd(fd)) { () throws(Errno) in
            try Stat(FileDescriptor(rawValue: fd), retryOnInterrupt: false)
        }
    }

    /// The status of the file at `path`, a symbolic link followed.
    ///
    /// The corresponding C function is `stat`.
    ///
    /// - Parameter path: The file.
    /// - Returns: Its status.
    /// - Throws: The `Errno` of the failed call.
    package static func stat(_ path: FilePath) throws(Errno) -> Stat {
        try withPath(path) { (p) throws(Errno) in
            try retryingInterrupts(.stat, .path(p, relativeTo: AT_FDCWD)) { () throws(Errno) in
                try Stat(p, followTargetSymlink: true, retryOnInterrupt: false)
            }
        }
    }

    /// The status of the file at `path`, a symbolic link itself.
    ///
    /// The corresponding C function is `lstat`.
    ///
    /// - Parameter path: The file.
    /// - Returns: Its status.
    /// - Throws: The `Errno` of the failed call.
    package static func lstat(_ path: FilePath) throws(Errno) -> Stat {
        try withPath(path) { (p) throws(Errno) in
            try retryingInterrupts(.lstat, .path(p, relativeTo: AT_FDCWD)) { () throws(Errno) in
                try Stat(p, followTargetSymlink: false, retryOnInterrupt: false)
            }
        }
    }

    /// The status of `path` relative to the open directory `directory`
    /// (`AT_FDCWD`: the working directory), a symbolic link followed or not.
    ///
    /// The corresponding C function is `fstatat`.
    ///
    /// - Parameters:
    ///   - directory: A directory's descriptor, or `AT_FDCWD`.
    ///   - path: The file, relative to `directory` unless absolute.
    ///   - followingSymlinks: Whether a symbolic link at `path` is followed.
    /// - Returns: Its status.
    /// - Throws: The `Errno` of the failed call.
    package static func fstatat(_ directory: CInt, _ path: UnsafePointer<CChar>,
                                followingSymlinks: Bool) throws(Errno) -> Stat {
        try retryingInterrupts(.fstatat, .path(path, relativeTo: directory)) { () throws(Errno) in
            try Stat(path, relativeTo: FileDescriptor(rawValue: directory),
                     flags: followingSymlinks ? [] : .symlinkNoFollow, retryOnInterrupt: false)
        }
    }

    /// Fills `buffer` with the `mask` fields of `path`'s status (an empty
    /// `path` with `AT_EMPTY_PATH` in `flags`: `directory` itself).
    ///
    /// The corresponding C function is `statx`.
    ///
    /// - Parameters:
    ///   - directory: A directory's (or with an empty path, the file's)
    ///     descriptor, or `AT_FDCWD`.
    ///   - path: The file.
    ///   - flags: `AT_*` flags.
    ///   - mask: The `STATX_*` fields wanted.
    ///   - buffer: Where they go.
    /// - Throws: The `Errno` of the failed call.
    package static func statx(_ directory: CInt, _ path: UnsafePointer<CChar>, flags: CInt, mask: UInt32,
                              into buffer: UnsafeMutablePointer<cliburing_statx_t>) throws(Errno) {
        _ = try retryingInterrupts(.statx, .path(path, relativeTo: directory)) { () throws(Errno) in
            try valueOrErrno(cliburing_statx(directory, path, flags, mask, buffer))
        }
    }

    /// The type of the file system `fd` is on (`statfs`'s `f_type`, such
    /// as `0xEF53` for ext2/3/4).
    ///
    /// The corresponding C function is `fstatfs`.
    ///
    /// - Parameter fd: The descriptor.
    /// - Returns: The magic number.
    /// - Throws: The `Errno` of the failed call.
    package static func fileSystemType(_ fd: CInt) throws(Errno) -> Int64 {
        try retryingInterrupts(.fstatfs, .fd(fd)) { () throws(Errno) in
            Int64(try valueOrErrno(cliburing_fs_type(fd)))
        }
    }
}
