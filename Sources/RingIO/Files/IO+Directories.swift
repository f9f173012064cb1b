#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOQueue
@_spi(Engine) import RingIOEngine
import RingIOChannel
import RingIOCopy

extension IO {
    /// Runs `body`, whose system calls may block, on a worker of
    /// `IOQueue.global`, or here when the calling thread may block (a pool
    /// worker, or `BlockingCalls.allowed`).
    ///
    /// Path operations (`statx`, `mkdir`, `unlink`, `rename`) take one hop
    /// here: io_uring would run them on its own io-wq workers, a hop there
    /// and one back (the `info` rows of Benchmarks/results/files.md).
    package static func blocking<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await BlockingCalls.run(body)
    }

    /// What the file system knows about the file at `path`.
    ///
    /// A path whose every component is in the kernel's dentry cache, on a
    /// local file system, is described on the calling thread, which no
    /// system call there can block (`openat2` with `RESOLVE_CACHED` and
    /// `O_PATH`, `fstatfs`, `statx` of the descriptor, `close`: about 4 µs);
    /// any other path with one `statx` on a worker of `IOQueue.global`.
    /// io_uring's `IORING_OP_STATX` runs on its io-wq workers, a hop there
    /// and back: measured 1.7× slower than the pool's hop, which is itself
    /// several times the inline calls on a busy machine
    /// (Benchmarks/results/files.md). See ``FileInfo`` for the fields and
    /// the time type.
    ///
    /// ```swift
    /// let info = try await IO.info(at: "Package.swift")
    /// print(info.size, info.modificationTime)
    /// ```
    ///
    /// - Parameters:
    ///   - path: the file; a relative path is resolved against the current
    ///     directory.
    ///   - followingSymlinks: whether a symlink at `path` is followed (the
    ///     default) or described itself.
    /// - Returns: the file's type, size, owner, permissions and times.
    /// - Throws: an ``IOError`` with operation `.stat` (`ENOENT`, `ENOTDIR`,
    ///   `EACCES`, `ELOOP`, `EINVAL` for an empty path).
    public static func info(at path: FilePath, followingSymlinks: Bool = true) async throws(IOError) -> FileInfo {
        if path.isEmpty { throw IOError(.stat, path: path, errno: .invalidArgument) }
        if let info = cachedInfo(at: path, followingSymlinks: followingSymlinks) { return info }
        return try await blocking { () -> Result<FileInfo, IOError> in
            Result { () throws(IOError) in try infoNow(at: path, followingSymlinks: followingSymlinks) }
        }.get()
    }

    /// File systems whose `statx` may wait on a server even for a cached
    /// dentry: NFS, SMB2, CIFS, FUSE, Ceph, 9P, AFS, Coda.
    static let networkFileSystems: Set<Int64> = [0x6969, 0xFE53_4D42, 0xFF53_4D42, 0x6573_5546, 0x00C3_6400,
                                                 0x0102_1997, 0x5346_414F, 0x7375_7245]

    /// `info(at:followingSymlinks:)` without waiting: `nil` unless `path`
    /// is all in the dentry cache and on a local file system.
    static func cachedInfo(at path: FilePath, followingSymlinks: Bool) -> FileInfo? {
        let flags = Syscall.pathOnly | O_CLOEXEC | (followingSymlinks ? 0 : O_NOFOLLOW)
        guard CachedOpens.available, let fd = try? CachedOpens.open(path, flags: flags) else { return nil }
        defer { Syscall.closeIgnoringErrors(fd) }
        guard let type = try? Syscall.fileSystemType(fd), !networkFileSystems.contains(type) else { return nil }
        var status = cliburing_statx_t()
        do throws(Errno) {
            try Syscall.statx(fd, "", flags: cliburing_at_empty_path(), mask: FileInfo.mask, into: &status)
        } catch {
            return nil
        }
        return FileInfo(status)
    }

    /// `info(at:followingSymlinks:)` on the calling thread.
    package static func infoNow(at path: FilePath, followingSymlinks: Bool) throws(IOError) -> FileInfo {
        var status = cliburing_statx_t()
        do throws(Errno) {
            try Syscall.withPath(path) { (p) throws(Errno) in
                try Syscall.statx(AT_FDCWD, p, flags: followingSymlinks ? 0 : AT_SYMLINK_NOFOLLOW,
                                  mask: FileInfo.mask, into: &status)
            }
        } catch {
            throw IOError(.stat, path: path, errno: error)
        }
        return FileInfo(status)
    }

    /// `info(at:followingSymlinks:)` as an `IORING_OP_STATX` request on
    /// `engine`: kept for the benchmark that compares it with the pool hop
    /// (the ring runs `statx` on an io-wq worker; slower here).
    @_spi(Engine)
    public static func info(at path: FilePath, followingSymlinks: Bool = true,
                            engine: IOEngine) async throws(IOError) -> FileInfo {
        let memory = RequestMemory(paths: [path], statx: true)
        let res = await memory.perform(engine: engine, .statx(directory: AT_FDCWD, path: memory.paths[0],
                                                              flags: followingSymlinks ? 0 : AT_SYMLINK_NOFOLLOW,
                                                              mask: FileInfo.mask, buffer: memory.statx!))
        if res < 0 { throw IOError(.stat, path: path, errno: Errno(rawValue: -res)) }
        return FileInfo(memory.statx!.pointee)
    }

    /// Creates a directory at `path`.
    ///
    /// With `intermediates`, missing parents are created too (with the
    /// same permissions), and a directory already at `path` is no error
    /// (`mkdir -p`); two tasks creating the same tree at once both succeed.
    ///
    /// ```swift
    /// try await IO.createDirectory(at: "build/logs/today", intermediates: true)
    /// ```
    ///
    /// - Parameters:
    ///   - path: the new directory.
    ///   - intermediates: whether to create missing parents and accept an
    ///     existing directory.
    ///   - permissions: its permissions, less the process's umask (the
    ///     default, `rwxr-xr-x`, is 0o755).
    /// - Throws: an ``IOError`` with operation `.create` naming the
    ///   directory that could not be made: `EEXIST` (something is there;
    ///   with `intermediates`, something that is not a directory),
    ///   `ENOENT` (no parent, without `intermediates`), `EACCES`, `ENOTDIR`.
    public static func createDirectory(at path: FilePath, intermediates: Bool = false,
                                       permissions: FilePermissions = [.ownerReadWriteExecute, .groupReadExecute,
                                                                       .otherReadExecute]) async throws(IOError) {
        if path.isEmpty { throw IOError(.create, path: path, errno: .invalidArgument) }
        try await blocking { () -> Result<Void, IOError> in
            Result { () throws(IOError) in
                try createDirectoryNow(at: path, intermediates: intermediates, permissions: permissions)
            }
        }.get()
    }

    /// `createDirectory` on the calling thread.
    package static func createDirectoryNow(at path: FilePath, intermediates: Bool,
                                           permissions: FilePermissions) throws(IOError) {
        do throws(Errno) {
            try Syscall.withPath(path) { (p) throws(Errno) in try Syscall.mkdirat(AT_FDCWD, p, permissions: permissions) }
        } catch .fileExists where intermediates {
            // Fine if it is a directory (or a symlink to one).
            if (try? infoNow(at: path, followingSymlinks: true))?.type == .directory { return }
            throw IOError(.create, path: path, errno: .fileExists)
        } catch .noSuchFileOrDirectory where intermediates {
            let parent = path.removingLastComponent()
            guard parent != path, !parent.isEmpty, path.lastComponent != nil else {
                throw IOError(.create, path: path, errno: .noSuchFileOrDirectory)
            }
            try createDirectoryNow(at: parent, intermediates: true, permissions: permissions)
            try createDirectoryNow(at: path, intermediates: true, permissions: permissions)
        } catch {
            throw IOError(.create, path: path, errno: error)
        }
    }

    /// Creates a symbolic link at `path` that points at `destination`.
    ///
    /// `destination` is stored as given (a relative one is resolved, when
    /// the link is followed, against the link's directory) and need not
    /// exist. The corresponding C function is `symlinkat`.
    ///
    /// - Parameters:
    ///   - path: the new link.
    ///   - destination: what it points at.
    /// - Throws: an ``IOError`` with operation `.create` (`EEXIST`, `ENOENT`).
    public static func createSymbolicLink(at path: FilePath, withDestination destination: FilePath) async throws(IOError) {
        try await blocking { () -> Result<Void, IOError> in
            Result { () throws(IOError) in
                do throws(Errno) {
                    try Syscall.withPath(destination) { (d) throws(Errno) in
                        try Syscall.withPath(path) { (p) throws(Errno) in try Syscall.symlinkat(d, AT_FDCWD, p) }
                    }
                } catch {
                    throw IOError(.create, path: path, errno: error)
                }
            }
        }.get()
    }

    /// What the symbolic link at `path` points at, unresolved.
    ///
    /// The corresponding C function is `readlinkat`.
    ///
    /// - Parameter path: the link.
    /// - Returns: its contents, as stored (bytes, not necessarily UTF-8).
    /// - Throws: an ``IOError`` with operation `.readLink` (`EINVAL`: not a
    ///   symlink; `ENOENT`).
    public static func destinationOfSymbolicLink(at path: FilePath) async throws(IOError) -> FilePath {
        try await blocking { () -> Result<FilePath, IOError> in
            Result { () throws(IOError) in
                do throws(Errno) {
                    return try Syscall.withPath(path) { (p) throws(Errno) in try Syscall.readlinkat(AT_FDCWD, p) }
                } catch {
                    throw IOError(.readLink, path: path, errno: error)
                }
            }
        }.get()
    }

    /// Sets the permissions of the file at `path` (a symlink is followed).
    ///
    /// The corresponding C function is `fchmodat`.
    ///
    /// - Parameters:
    ///   - permissions: the new permissions (set-user-ID, set-group-ID and
    ///     sticky included).
    ///   - path: the file.
    /// - Throws: an ``IOError`` with operation `.setAttributes` (`EPERM`:
    ///   not the owner; `ENOENT`).
    public static func setPermissions(_ permissions: FilePermissions, at path: FilePath) async throws(IOError) {
        try await blocking { () -> Result<Void, IOError> in
            Result { () throws(IOError) in
                do throws(Errno) {
                    try Syscall.withPath(path) { (p) throws(Errno) in try Syscall.fchmodat(AT_FDCWD, p, permissions) }
                } catch {
                    throw IOError(.setAttributes, path: path, errno: error)
                }
            }
        }.get()
    }

    /// Sets the access and modification times of the file at `path`;
    /// a `nil` time is left as it is.
    ///
    /// The corresponding C function is `utimensat`.
    ///
    /// - Parameters:
    ///   - path: the file.
    ///   - access: its new access time, or `nil`.
    ///   - modification: its new modification time, or `nil`.
    ///   - followingSymlinks: whether a symlink at `path` is followed (the
    ///     default) or has its own times set.
    /// - Throws: an ``IOError`` with operation `.setAttributes` (`EPERM`,
    ///   `ENOENT`).
    public static func setTimes(at path: FilePath, access: FileInfo.Timestamp? = nil,
                                modification: FileInfo.Timestamp? = nil,
                                followingSymlinks: Bool = true) async throws(IOError) {
        // UTIME_OMIT, ((1 << 30) - 2): leave that time (a macro Swift cannot see).
        let omit = timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2)
        let times = (access: access?.cTimespec ?? omit, modification: modification?.cTimespec ?? omit)
        try await blocking { () -> Result<Void, IOError> in
            Result { () throws(IOError) in
                do throws(Errno) {
                    try Syscall.withPath(path) { (p) throws(Errno) in
                        try Syscall.utimensat(AT_FDCWD, p, times: times, flags: followingSymlinks ? 0 : AT_SYMLINK_NOFOLLOW)
                    }
                } catch {
                    throw IOError(.setAttributes, path: path, errno: error)
                }
            }
        }.get()
    }
}
