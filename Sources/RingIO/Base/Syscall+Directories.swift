#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// Directories and links: getdents64, symlinkat, readlinkat, fchmodat, mkdtemp.

extension Syscall.Call {
    package static let getdents64 = Syscall.Call("getdents64")
    package static let symlinkat = Syscall.Call("symlinkat")
    package static let readlinkat = Syscall.Call("readlinkat")
    package static let fchmodat = Syscall.Call("fchmodat")
    package static let mkdtemp = Syscall.Call("mkdtemp")
}

extension Syscall {
    /// Fills `buffer` with the next entries of the open directory `fd`, as
    /// `struct linux_dirent64` records (`d_ino`, `d_off`, `d_reclen`,
    /// `d_type`, then the NUL-terminated name).
    ///
    /// The corresponding C function is `getdents64`.
    ///
    /// - Parameters:
    ///   - fd: A directory opened for reading (`O_DIRECTORY`).
    ///   - buffer: Where the records go; it must hold the largest record
    ///     (about 280 bytes), else `EINVAL`.
    /// - Returns: The bytes filled; 0 at the end of the directory.
    /// - Throws: The `Errno` of the failed call (`ENOENT`: the directory was
    ///   removed while open).
    package static func getdents64(_ fd: CInt, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try retryingInterrupts(.getdents64, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(cliburing_getdents64(fd, buffer.baseAddress, UInt(buffer.count)))
        }
    }

    /// Creates the symbolic link `path` whose contents are `target`.
    ///
    /// The corresponding C function is `symlinkat`.
    ///
    /// - Parameters:
    ///   - target: What the link points at (not resolved: any bytes).
    ///   - directory: The directory `path` is relative to, or `AT_FDCWD`.
    ///   - path: The new link.
    /// - Throws: The `Errno` of the failed call (`EEXIST`).
    package static func symlinkat(_ target: UnsafePointer<CChar>, _ directory: CInt = AT_FDCWD,
                                  _ path: UnsafePointer<CChar>) throws(Errno) {
        _ = try retryingInterrupts(.symlinkat, .path(path, relativeTo: directory)) { () throws(Errno) in
            try valueOrErrno(Glibc.symlinkat(target, directory, path))
        }
    }

    /// The contents of the symbolic link `path`, as its bytes.
    ///
    /// The corresponding C function is `readlinkat`.
    ///
    /// - Parameters:
    ///   - directory: The directory `path` is relative to, or `AT_FDCWD`.
    ///   - path: The link.
    /// - Returns: What the link points at, unresolved.
    /// - Throws: The `Errno` of the failed call (`EINVAL`: not a link).
    package static func readlinkat(_ directory: CInt = AT_FDCWD, _ path: UnsafePointer<CChar>) throws(Errno) -> FilePath {
        try retryingInterrupts(.readlinkat, .path(path, relativeTo: directory)) { () throws(Errno) in
            // PATH_MAX first; a longer target (possible on some file
            // systems) is read again into a buffer twice the size.
            var capacity = Int(PATH_MAX)
            while true {
                let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: capacity + 1)
                defer { buffer.deallocate() }
                let n = try valueOrErrno(Glibc.readlinkat(directory, path, buffer, capacity))
                if n < capacity {
                    buffer[n] = 0
                    return FilePath(platformString: buffer)
                }
                capacity *= 2
            }
        }
    }

    /// Sets the permissions of `path` (`chmod`; a symlink is followed).
    ///
    /// The corresponding C function is `fchmodat`.
    ///
    /// - Parameters:
    ///   - directory: The directory `path` is relative to, or `AT_FDCWD`.
    ///   - path: The file.
    ///   - permissions: The permissions (set-user-ID and the like included).
    /// - Throws: The `Errno` of the failed call.
    package static func fchmodat(_ directory: CInt = AT_FDCWD, _ path: UnsafePointer<CChar>,
                                 _ permissions: FilePermissions) throws(Errno) {
        _ = try retryingInterrupts(.fchmodat, .path(path, relativeTo: directory)) { () throws(Errno) in
            try valueOrErrno(Glibc.fchmodat(directory, path, permissions.rawValue, 0))
        }
    }

    /// Creates a new directory (mode 0700) from `template`, whose last six
    /// characters `XXXXXX` it replaces to make the name unique.
    ///
    /// The corresponding C function is `mkdtemp`.
    ///
    /// - Parameter template: A path ending in `XXXXXX`.
    /// - Returns: The new directory's path.
    /// - Throws: The `Errno` of the failed call (`EINVAL`: no `XXXXXX`).
    package static func mkdtemp(_ template: FilePath) throws(Errno) -> FilePath {
        try withPath(template) { (t) throws(Errno) in
            let count = strlen(t) + 1
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: count)
            defer { buffer.deallocate() }
            buffer.initialize(from: t, count: count)
            return try retryingInterrupts(.mkdtemp, .path(t, relativeTo: AT_FDCWD)) { () throws(Errno) in
                guard Glibc.mkdtemp(buffer) != nil else { throw Errno(rawValue: cliburing_errno()) }
                return FilePath(platformString: buffer)
            }
        }
    }
}
