#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

// Paths and metadata: rename, unlink, mkdir, chmod, chown, times, getcwd.

extension Syscall.Call {
    package static let renameat2 = Syscall.Call("renameat2")
    package static let unlinkat = Syscall.Call("unlinkat")
    package static let mkdirat = Syscall.Call("mkdirat")
    package static let fchmod = Syscall.Call("fchmod")
    package static let fchown = Syscall.Call("fchown")
    package static let fchownat = Syscall.Call("fchownat")
    package static let utimensat = Syscall.Call("utimensat")
    package static let getcwd = Syscall.Call("getcwd")
    package static let opendir = Syscall.Call("opendir")
}

extension Syscall {
    /// Renames `old` to `new` (`flags`: `RENAME_NOREPLACE` fails with
    /// `EEXIST` rather than replace; 0 replaces, as `rename` does).
    ///
    /// The corresponding C function is `renameat2`.
    ///
    /// - Parameters:
    ///   - oldDirectory: The directory `old` is relative to, or `AT_FDCWD`.
    ///   - old: The current name.
    ///   - newDirectory: The directory `new` is relative to, or `AT_FDCWD`.
    ///   - new: The new name.
    ///   - flags: `RENAME_*` flags.
    /// - Throws: The `Errno` of the failed call.
    package static func renameat2(_ oldDirectory: CInt = AT_FDCWD, _ old: UnsafePointer<CChar>,
                                  _ newDirectory: CInt = AT_FDCWD, _ new: UnsafePointer<CChar>,
                                  flags: UInt32 = 0) throws(Errno) {
        // The mock resolves both paths against `oldDirectory` (the library
        // renames within one directory).
        _ = try retryingInterrupts(.renameat2, .paths(old, new, relativeTo: oldDirectory)) { () throws(Errno) in
            try valueOrErrno(cliburing_renameat2(oldDirectory, old, newDirectory, new, flags))
        }
    }

    /// `renameat2` for two `FilePath`s, relative to the working directory.
    ///
    /// The corresponding C function is `renameat2`.
    ///
    /// - Parameters:
    ///   - old: The current name.
    ///   - new: The new name.
    ///   - noReplace: Fail with `EEXIST` rather than replace `new`.
    /// - Throws: The `Errno` of the failed call.
    package static func rename(_ old: FilePath, to new: FilePath, noReplace: Bool = false) throws(Errno) {
        try withPath(old) { (o) throws(Errno) in
            try withPath(new) { (n) throws(Errno) in
                try renameat2(AT_FDCWD, o, AT_FDCWD, n, flags: noReplace ? UInt32(RENAME_NOREPLACE) : 0)
            }
        }
    }

    /// Removes the name `path` (`AT_REMOVEDIR` in `flags`: an empty directory).
    ///
    /// The corresponding C function is `unlinkat`.
    ///
    /// - Parameters:
    ///   - directory: The directory `path` is relative to, or `AT_FDCWD`.
    ///   - path: The name.
    ///   - flags: 0 or `AT_REMOVEDIR`.
    /// - Throws: The `Errno` of the failed call.
    package static func unlinkat(_ directory: CInt = AT_FDCWD, _ path: UnsafePointer<CChar>, flags: CInt = 0) throws(Errno) {
        _ = try retryingInterrupts(.unlinkat, .path(path, relativeTo: directory)) { () throws(Errno) in
            try valueOrErrno(Glibc.unlinkat(directory, path, flags))
        }
    }

    /// `unlinkat` for a `FilePath`, relative to the working directory.
    ///
    /// The corresponding C function is `unlinkat`.
    ///
    /// - Parameter path: The file.
    /// - Throws: The `Errno` of the failed call.
    package static func unlink(_ path: FilePath) throws(Errno) {
        try withPath(path) { (p) throws(Errno) in try unlinkat(AT_FDCWD, p) }
    }

    /// Creates the directory `path` with `permissions` (less the umask).
    ///
    /// The corresponding C function is `mkdirat`.
    ///
    /// - Parameters:
    ///   - directory: The directory `path` is relative to, or `AT_FDCWD`.
    ///   - path: The new directory.
    ///   - permissions: Its permissions.
    /// - Throws: The `Errno` of the failed call (`EEXIST`).
    package static func mkdirat(_ directory: CInt = AT_FDCWD, _ path: UnsafePointer<CChar>,
                                permissions: FilePermissions) throws(Errno) {
        _ = try retryingInterrupts(.mkdirat, .path(path, relativeTo: directory)) { () throws(Errno) in
            try valueOrErrno(Glibc.mkdirat(directory, path, permissions.rawValue))
        }
    }

    /// Sets an open file's permissions.
    ///
    /// The corresponding C function is `fchmod`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - permissions: The permissions (set-user-ID and the like included).
    /// - Throws: The `Errno` of the failed call.
    package static func fchmod(_ fd: CInt, _ permissions: FilePermissions) throws(Errno) {
        _ = try retryingInterrupts(.fchmod, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(Glibc.fchmod(fd, permissions.rawValue))
        }
    }

    /// Sets an open file's owner and group (`UInt32.max`: leave it).
    ///
    /// The corresponding C function is `fchown`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - user: The owner's ID.
    ///   - group: The group's ID.
    /// - Throws: The `Errno` of the failed call (`EPERM` for another's file).
    package static func fchown(_ fd: CInt, user: uid_t, group: gid_t) throws(Errno) {
        _ = try retryingInterrupts(.fchown, .fd(fd)) { () throws(Errno) in
            try valueOrErrno(Glibc.fchown(fd, user, group))
        }
    }

    /// Sets the owner and group of `path` (`UInt32.max`: leave it), or of
    /// the symlink itself with `AT_SYMLINK_NOFOLLOW`.
    ///
    /// The corresponding C function is `fchownat`.
    ///
    /// - Parameters:
    ///   - directory: The directory `path` is relative to, or `AT_FDCWD`.
    ///   - path: The file.
    ///   - user: The owner's ID.
    ///   - group: The group's ID.
    ///   - flags: `AT_SYMLINK_NOFOLLOW` or 0.
    /// - Throws: The `Errno` of the failed call (`EPERM` for another's file).
    package static func fchownat(_ directory: CInt = AT_FDCWD, _ path: UnsafePointer<CChar>, user: uid_t, group: gid_t,
                                 flags: CInt = 0) throws(Errno) {
        _ = try retryingInterrupts(.fchownat, .path(path, relativeTo: directory)) { () throws(Errno) in
            try valueOrErrno(Glibc.fchownat(directory, path, user, group, flags))
        }
    }

    /// Sets the access and modification times of `path` (an empty path with
    /// `AT_EMPTY_PATH`: `directory` itself; `nil` for `path`: the open file
    /// `directory`: then the C function is `futimens`).
    ///
    /// The corresponding C function is `utimensat`.
    ///
    /// - Parameters:
    ///   - directory: A directory's descriptor (or the file's), or `AT_FDCWD`.
    ///   - path: The file, or `nil` for `directory` itself.
    ///   - times: Access, then modification time (`UTIME_OMIT`, `UTIME_NOW`).
    ///   - flags: `AT_SYMLINK_NOFOLLOW` or 0.
    /// - Throws: The `Errno` of the failed call.
    package static func utimensat(_ directory: CInt, _ path: UnsafePointer<CChar>?,
                                  times: (access: timespec, modification: timespec), flags: CInt = 0) throws(Errno) {
        var both = [times.access, times.modification]
        let target: Target = path.map { .path($0, relativeTo: directory) } ?? .fd(directory)
        _ = try retryingInterrupts(.utimensat, target) { () throws(Errno) in
            try valueOrErrno(path.map { Glibc.utimensat(directory, $0, &both, flags) } ?? Glibc.futimens(directory, &both))
        }
    }

    /// The working directory.
    ///
    /// The corresponding C function is `getcwd`.
    ///
    /// - Returns: Its absolute path.
    /// - Throws: The `Errno` of the failed call (`ENOENT`: it was removed).
    package static func getcwd() throws(Errno) -> FilePath {
        try retryingInterrupts(.getcwd) { () throws(Errno) in
            guard let cwd = Glibc.getcwd(nil, 0) else { throw Errno(rawValue: cliburing_errno()) }
            defer { free(cwd) }
            return FilePath(platformString: cwd)
        }
    }

    /// The names in the directory at `path`, `.` and `..` left out, in the
    /// order the file system gives them.
    ///
    /// The corresponding C functions are `opendir`, `readdir` and `closedir`.
    ///
    /// - Parameter path: The directory.
    /// - Returns: The names.
    /// - Throws: The `Errno` of the failed `opendir` (`ENOENT`, `ENOTDIR`, `EACCES`).
    package static func directoryEntries(_ path: FilePath) throws(Errno) -> [String] {
        let stream = try withPath(path) { (p) throws(Errno) in
            try retryingInterrupts(.opendir, .path(p, relativeTo: AT_FDCWD)) { () throws(Errno) in
                guard let stream = Glibc.opendir(p) else { throw Errno(rawValue: cliburing_errno()) }
                return stream
            }
        }
        defer { Glibc.closedir(stream) }
        var names: [String] = []
        while let entry = Glibc.readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
