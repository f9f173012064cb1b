#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOChannel
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

extension IO {
    /// How `IO.copyFile(from:to:options:engine:)` creates its destination.
    public struct CopyOptions: Sendable, Hashable {
        /// Write a new file beside the destination and rename it into place
        /// once every byte is written. A failed or cancelled copy then leaves
        /// the destination as it was, and no partial file behind. (It does not
        /// flush: a crash right after the rename may lose the new contents.)
        public var atomically: Bool
        /// Fail with `EEXIST` when the destination exists, rather than
        /// replace it.
        public var exclusive: Bool
        /// The new file's permission bits, before the umask; `nil` takes the
        /// source's. An existing file that is truncated keeps its own.
        public var permissions: FilePermissions?

        /// Whether a new file takes the source's set-user-ID, set-group-ID
        /// and sticky bits along with its permission bits, where
        /// `permissions` is nil and `preserve` has no `.permissions`
        /// (`true` by default; `cp` without `-p` leaves them out: `false`).
        public var copiesSpecialModeBits = true

        /// Whether a file larger than `IO.smallFileLimit` may share its
        /// source's blocks (`FICLONE`, on btrfs or XFS); `.never` by default.
        public var reflink: FileCopier.Reflink = .never

        /// What of the source's metadata the copy also takes (`[]` by
        /// default: the bytes, and the permission bits under the umask).
        /// `copyItem` applies it to every file, symlink and directory of a
        /// tree (a directory's times once its entries are copied).
        public var preserve: Preserved = []

        /// Metadata a copy may take from its source, beyond the bytes.
        public struct Preserved: OptionSet, Sendable, Hashable {
            public let rawValue: UInt8
            public init(rawValue: UInt8) { self.rawValue = rawValue }
            /// The permission bits exactly (set-user-ID, set-group-ID and
            /// sticky included), the umask not applied (`cp -p`).
            public static let permissions = Preserved(rawValue: 1 << 0)
            /// The access and modification times.
            public static let times = Preserved(rawValue: 1 << 1)
            /// The owner and group, where permitted: the owner needs
            /// `CAP_CHOWN` (root), the group that the caller belongs to it;
            /// what is not permitted (`EPERM`) is left, as `cp -p` does.
            public static let owner = Preserved(rawValue: 1 << 2)
            /// Permissions, times and owner (`cp -p`).
            public static let all: Preserved = [.permissions, .times, .owner]
        }

        /// How `IO.copyItem` treats symlinks in what it copies (`copyFile`
        /// always reads what a symlink names).
        public var followSymlinks: SymlinkFollowing = .never

        /// Which symlinks `IO.copyItem` follows.
        public enum SymlinkFollowing: Sendable, Hashable {
            /// None: each symlink is copied as a symlink (`cp -P`, the default).
            case never
            /// Only `source` itself, when it is a symlink (`cp -H`); those
            /// inside the tree are copied as symlinks.
            case source
            /// Every one (`cp -L`): what a symlink names is copied in its
            /// place, a directory with its whole tree. A symlink to a
            /// directory that contains it fails with `ELOOP`, and a dangling
            /// one with `ENOENT`.
            case always
        }

        /// The entries of a tree `IO.copyItem` copies at once (8 by
        /// default; at least 1). With 1, entries are copied one after
        /// another in the order they are listed.
        public var maximumConcurrentCopies = 8

        /// Options for `copyFile(from:to:options:engine:)`; each is described on its property.
        public init(atomically: Bool = false, exclusive: Bool = false, permissions: FilePermissions? = nil) {
            self.atomically = atomically
            self.exclusive = exclusive
            self.permissions = permissions
        }
    }

    /// Regular files up to this size are copied whole by one worker of
    /// `IOQueue.global` (stat, open, create, read, write, close, rename in
    /// plain system calls): one hand-off in, one completion out, or none
    /// when the awaiting task already runs on a worker of `IOQueue.global`.
    public static let smallFileLimit = 256 << 10

    /// Copies the file at `source` to `destination` (created or truncated,
    /// with the source's permission bits), reading ahead at most two chunks
    /// while up to four are being written.
    ///
    /// - Throws: an `IOError` (see `copyFile(from:to:options:engine:)`).
    public static func copyFile(from source: FilePath, to destination: FilePath,
                                engine: IOEngine = .shared) async throws(IOError) {
        try await copyFile(from: source, to: destination, options: CopyOptions(), engine: engine)
    }

    /// Copies the file at `source` to `destination`, as `options` say: a
    /// `FileCopier` with `replace: .atomic` for `atomically` (else
    /// `.inPlace`), `exclusive` and `permissions` as given, the strategy
    /// chosen per file.
    ///
    /// A regular file of at most `smallFileLimit` bytes is copied by one
    /// worker of `IOQueue.global`, in plain system calls: the stats, both
    /// opens, one read of the whole file, one write, both closes and (with
    /// `atomically`) the rename of the new file into place; the caller's
    /// task is handed over once and resumed once, on its own executor.
    /// (io_uring would run each path operation on an io-wq worker, a thread
    /// hop each.) The copy holds the bytes the stat counted. A larger
    /// regular file is opened the same way, then copied inside the kernel
    /// (`copy_file_range`, else splices, else two channels); a FIFO or a
    /// device on either side is opened through the engine and streams, in
    /// place.
    ///
    /// The destination is compared with the source (device and inode)
    /// before anything is truncated: a copy onto the source itself, or onto
    /// a hard link or symlink to it, is refused (`EINVAL`, operation
    /// `.copyOntoSource`) and leaves the file as it was.
    ///
    /// - Returns: the number of bytes copied.
    /// - Throws: an `IOError` naming the operation, the path and the side
    ///   (`.source` or `.destination`) with the errno: `EINVAL` for an
    ///   empty path or the same file on both sides, `EISDIR` for a
    ///   directory, `EEXIST` when `exclusive` finds the destination; the
    ///   stat, open, read, write, close or rename error; `ECANCELED` when the
    ///   task is cancelled. A failed copy removes the file it created (the
    ///   temporary with `atomically`; in place, a destination that was not
    ///   there before). Match it by errno: `catch Errno.noSpace`.
    @discardableResult
    public static func copyFile(from source: FilePath, to destination: FilePath, options: CopyOptions,
                                engine: IOEngine = .shared) async throws(IOError) -> Int64 {
        var copier = FileCopier(engine: engine)
        copier.replace = options.atomically ? .atomic : .inPlace
        copier.exclusive = options.exclusive
        copier.permissions = options.permissions
        copier.preserve = options.preserve
        copier.copiesSpecialModeBits = options.copiesSpecialModeBits
        copier.reflink = options.reflink
        return try await copier.copy(from: source, to: destination).bytes
    }

    /// `copyFile(from:to:options:engine:)` of a source the caller has just
    /// found to be a regular file (a tree walk's entry): opened with no
    /// stat of its path first (`FileCopier.copy(from:to:sourceType:)`).
    @discardableResult
    package static func copyFile(from source: FilePath, to destination: FilePath, options: CopyOptions,
                                 regularSource: Bool, engine: IOEngine = .shared) async throws(IOError) -> Int64 {
        var copier = FileCopier(engine: engine)
        copier.replace = options.atomically ? .atomic : .inPlace
        copier.exclusive = options.exclusive
        copier.permissions = options.permissions
        copier.preserve = options.preserve
        copier.copiesSpecialModeBits = options.copiesSpecialModeBits
        copier.reflink = options.reflink
        return try await copier.copy(from: source, to: destination, sourceIsRegular: regularSource).bytes
    }
}

/// What `PathRequest.stat` reports (the copy's own few fields; the public
/// `FileInfo` is `IO.info(at:)`'s).
struct CopyFileInfo: Sendable {
    var kind: FileKind
    var mode: UInt32
    var size: Int64
    /// Which file it is: its device and inode.
    var device: UInt64
    var inode: UInt64

    init(_ stx: cliburing_statx_t) {
        kind = FileType(mode: mode_t(stx.stx_mode))
        mode = UInt32(stx.stx_mode)
        size = Int64(stx.stx_size)
        device = UInt64(stx.stx_dev_major) << 32 | UInt64(stx.stx_dev_minor)
        inode = UInt64(stx.stx_ino)
    }

    func isSameFile(as other: CopyFileInfo) -> Bool { device == other.device && inode == other.inode }
}

/// One-shot path requests through the engine, awaited.
enum PathRequest {
    struct Paths {
        let source: FilePath
        /// Where the bytes are written.
        let target: FilePath
        /// The temporary `target` and its rename onto the destination at
        /// the end; nil: written in place, no rename.
        let atomic: AtomicReplace?

        /// A copy into `replace`'s temporary, renamed at the end.
        init(source: FilePath, replacing replace: AtomicReplace) {
            self.source = source
            target = replace.temporary
            atomic = replace
        }

        /// A copy written where it goes (`target`: the destination, or a
        /// name only shown in errors).
        init(source: FilePath, inPlace target: FilePath) {
            self.source = source
            self.target = target
            atomic = nil
        }

        /// Where `target` is renamed to at the end; nil: no rename.
        var destination: FilePath? { atomic?.destination }

        /// The destination the caller named, for errors.
        var shownDestination: FilePath { destination ?? target }
    }

    struct Pair {
        let info: CopyFileInfo
        let input: Int32
        let output: Int32
        /// What the final destination is, when it was stat'ed (a rename at
        /// the end) and exists, or what the existing target opened in place
        /// is: a FIFO or a device there is written in place, as a stream.
        var destinationKind: FileKind? = nil
        /// The target was created by this copy (`O_EXCL`): a failed copy removes it.
        var created = false
    }

    /// The source's stat and both files open. With `permissions` and
    /// `createNew`, all the requests go in one batch (a target we create
    /// may be removed again if the source turns out to be a directory);
    /// otherwise the stat comes first, so that nothing is created for a
    /// source that cannot be copied. The target is never opened with
    /// `O_TRUNC`: a destination that exists is compared with the source
    /// (device and inode, through both open files) and truncated only if it
    /// is another file; with a rename at the end, the destination path is
    /// stat'ed in the same batch and compared. `completion` runs on the
    /// engine's thread or on `IOQueue.global`.
    static func openPair(engine: IOEngine, _ paths: Paths, permissions: FilePermissions?, createNew: Bool,
                         readable: Bool = false, modeMask: CModeT = 0o7777,
                         _ completion: @escaping @Sendable (Result<Pair, IOError>) -> Void) {
        let memory = RequestMemory(paths: [paths.source, paths.target] + (paths.destination.map { [$0] } ?? []),
                                   statx: true)
        let mask = UInt32(STATX_TYPE | STATX_MODE | STATX_SIZE | STATX_INO)
        let statSource = IORequest.Operation.statx(directory: AT_FDCWD, path: memory.paths[0], flags: 0,
                                                   mask: mask, buffer: memory.statx!)
        // The final destination, followed as the rename will not: a symlink to the source is the source.
        let statDestination: [IORequest.Operation] = paths.destination == nil ? [] : [
            .statx(directory: AT_FDCWD, path: memory.paths[2], flags: 0, mask: mask, buffer: memory.statx! + 1),
        ]
        let targetFlags = (readable ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC | O_NOCTTY | (createNew ? O_EXCL : 0)
        let shown = paths.shownDestination
        let sameFile = IOError(.copyOntoSource, path: shown, side: .destination, errno: .invalidArgument)
        /// `results`: the source's statx, its open, the target's open, then the destination's statx if any.
        @Sendable func finish(_ results: [Int32]) {
            let (input, output) = (results[1], results[2])
            // The statx buffers hold something only when the statx succeeded.
            let info = results[0] >= 0 ? CopyFileInfo(memory.statx!.pointee) : nil
            var failure: IOError?
            if let index = results.prefix(3).firstIndex(where: { $0 < 0 }) {
                let errno = Errno(rawValue: -results[index])
                failure = switch index {
                case 0: IOError(.stat, path: paths.source, side: .source, errno: errno)
                case 1: IOError(.openForReading, path: paths.source, side: .source, errno: errno)
                default: IOError(createNew ? .create : .openForWriting, path: shown, side: .destination, errno: errno)
                }
            } else if info?.kind == .directory {
                failure = IOError(.openForReading, path: paths.source, side: .source, errno: .isDirectory)
            } else if results.count > 3 && results[3] >= 0, let info,
                      CopyFileInfo((memory.statx! + 1).pointee).isSameFile(as: info) {
                failure = sameFile
            }
            if let failure {
                return cleanUp([input, output].filter { $0 >= 0 }, removing: output >= 0 && createNew ? paths.target : nil) {
                    completion(.failure(failure))
                }
            }
            let pair = Pair(info: info!, input: input, output: output,
                            destinationKind: results.count > 3 && results[3] >= 0
                                ? CopyFileInfo((memory.statx! + 1).pointee).kind : nil)
            if createNew { return completion(.success(pair)) }
            // An existing file: which one is it? Then truncated, off the engine's thread.
            IOQueue.global.async {
                let statuses = Result { () throws(Errno) in (try Syscall.fstat(input), try Syscall.fstat(output)) }
                var failure: IOError?
                switch statuses {
                case .failure(let error):
                    failure = IOError(.stat, path: shown, side: .destination, errno: error)
                case .success(let (a, b)):
                    if a.deviceID == b.deviceID && a.inode == b.inode {
                        failure = sameFile
                    } else if b.type == .regular {
                        do throws(Errno) { try Syscall.ftruncate(output, to: 0) } catch {
                            failure = IOError(.write, path: shown, side: .destination, errno: error)
                        }
                    }
                }
                guard case .success(let (_, b)) = statuses, failure == nil else {
                    Syscall.closeIgnoringErrors(input)
                    Syscall.closeIgnoringErrors(output)
                    return completion(.failure(failure!))
                }
                // What is written in place: a FIFO or a device streams, never takes the chain.
                var pair = pair
                pair.destinationKind = b.type
                completion(.success(pair))
            }
        }
        let openSource = IORequest.Operation.openat(directory: AT_FDCWD, path: memory.paths[0],
                                                    flags: O_RDONLY | O_CLOEXEC | O_NOCTTY, mode: 0)
        if let permissions, createNew {
            let requests = [statSource, openSource,
                            .openat(directory: AT_FDCWD, path: memory.paths[1], flags: targetFlags,
                                    mode: UInt32(permissions.rawValue))] + statDestination
            memory.submit(engine: engine, requests, linked: false, mayBlock: true, finish)
            return
        }
        memory.submit(engine: engine, [statSource] + statDestination, linked: false) { stat in
            if stat[0] < 0 {
                return completion(.failure(IOError(.stat, path: paths.source, side: .source, errno: Errno(rawValue: -stat[0]))))
            }
            let info = CopyFileInfo(memory.statx!.pointee)
            if info.kind == .directory {
                return completion(.failure(IOError(.openForReading, path: paths.source, side: .source, errno: .isDirectory)))
            }
            let mode = permissions?.rawValue ?? CModeT(info.mode & 0o7777) & modeMask
            // Linked: a source that cannot be opened (a socket: ENXIO) leaves no new file behind.
            memory.submit(engine: engine, [
                .openat(directory: AT_FDCWD, path: memory.paths[0], flags: O_RDONLY | O_CLOEXEC | O_NOCTTY, mode: 0),
                .openat(directory: AT_FDCWD, path: memory.paths[1], flags: targetFlags, mode: UInt32(mode)),
            ], linked: true, mayBlock: true) { opened in finish([stat[0]] + opened + stat.dropFirst()) }
        }
    }

    static func openPair(engine: IOEngine, _ paths: Paths, permissions: FilePermissions?,
                         createNew: Bool, readable: Bool = false, modeMask: CModeT = 0o7777) async throws(IOError) -> Pair {
        let result = await withUnsafeContinuation { continuation in
            openPair(engine: engine, paths, permissions: permissions, createNew: createNew, readable: readable,
                     modeMask: modeMask) {
                continuation.resume(returning: $0)
            }
        }
        return try result.get()
    }

    /// After a failure, on `IOQueue.global` rather than the engine's thread
    /// (an unlink may wait on the file system): closes `fds`, removes
    /// `removing`, then calls `then`.
    static func cleanUp(_ fds: [Int32], removing target: FilePath?, then: @escaping @Sendable () -> Void) {
        IOQueue.global.async {
            for fd in fds { Syscall.closeIgnoringErrors(fd) }
            if let target { try? Syscall.unlink(target) }
            then()
        }
    }
}
