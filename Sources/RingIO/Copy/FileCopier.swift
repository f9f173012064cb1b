#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOChannel
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

/// RingIO's one way to copy a file's bytes: it chooses how (one pool
/// worker's read and write for a small file, `copy_file_range`, splices, channels, a stream for a
/// FIFO or a device, a reflink when asked), replaces the destination by one
/// policy, reports progress, and reports errors as `IOError`s that name the
/// side, the path and the errno.
///
/// ```swift
/// var copier = FileCopier()
/// copier.progress = { bytes in print("+\(bytes)") }
/// let outcome = try await copier.copy(from: "big.img", to: "backup/big.img")
/// print(outcome.bytes, outcome.strategy)
/// ```
///
/// **Replacing the destination.** With `replace: .atomic` (the default)
/// the bytes go into a new file beside the destination
/// (`IO.temporaryPath(beside:)`), renamed onto it once all are written: a
/// reader sees the old file or the whole new one, and a failed or cancelled
/// copy leaves the destination as it was, with no temporary file behind.
/// With `.inPlace` an existing destination is truncated and written. A
/// FIFO, a device or a socket on either side is always copied in place,
/// as the bytes come (a FIFO renamed over would leave its reader with
/// nothing; a FIFO source has no size to wait for).
///
/// **Flushing.** `sync: .none` (the default, as `cp`) flushes nothing: a
/// crash soon after the copy may lose the new contents (after an atomic
/// replace, the old ones are gone too). `sync: .beforeRename` flushes the
/// new file (`fsync`) before it is closed and renamed, so a crash leaves the
/// old file or the whole new one.
///
/// **Strategies** (`Outcome.strategy` says which ran): a regular file of at
/// most `IO.smallFileLimit` bytes is copied by one worker of
/// `IOQueue.global` in plain system calls, opens, read, write, closes and
/// rename, with one hand-off in and one out (`.chain`; none from a task
/// already on a worker of `IOQueue.global`, which makes the calls itself); a larger one is sized first, then its data (holes
/// skipped, `SEEK_DATA`) is copied with `copy_file_range` inside the kernel
/// (`.copyFileRange`), falling back to splices through pipes (`.splice`)
/// where the file systems cannot, then to two random channels
/// (`.channels`). Onto ext4, where `copy_file_range` is itself a splice
/// through a 64 KiB pipe, the data's blocks are allocated first
/// (`fallocate`) and the bytes spliced through one 1 MiB pipe (`.splice`):
/// about 0.65× cp's time for 1 GiB. `strategy` asks for one of them (a
/// strategy the files do not allow falls back the same way); `reflink`
/// asks for `FICLONE`. The ways are tried in that order, each once: one
/// that moved nothing and failed with `EXDEV`, `EINVAL`, `EOPNOTSUPP`,
/// `ENOSYS` or `ENOTTY` (these files, this file system cannot) gives way
/// to the next; any other failure, or one after bytes moved, is the copy's.
public struct FileCopier: Sendable {
    /// How the destination is replaced.
    public enum Replace: Sendable, Hashable {
        /// A new file beside it, renamed onto it at the end.
        case atomic
        /// Truncated and written where it is.
        case inPlace
    }

    /// When the new file is flushed to its storage.
    public enum Sync: Sendable, Hashable {
        /// Never (as `cp`).
        case none
        /// `fsync` once written, before it is closed (and renamed).
        case beforeRename
    }

    /// How the bytes move.
    public enum Strategy: String, Sendable, Hashable, CustomStringConvertible {
        /// The copier chooses (a request only: an outcome names what ran).
        case automatic
        /// A small regular file: read whole and written by one pool worker
        /// (with its opens, closes and rename: no other thread takes part).
        case chain
        /// `copy_file_range(2)` inside the kernel.
        case copyFileRange = "copy_file_range"
        /// Spliced through pipes inside the kernel (`IO.copyRanges`; onto
        /// ext4, one 1 MiB pipe on a thread).
        case splice
        /// Read and written through two random channels.
        case channels
        /// A FIFO, a device or a socket: read and written in turn, as the bytes come.
        case stream
        /// The destination shares the source's blocks (`FICLONE`).
        case reflink

        public var description: String { rawValue }
    }

    /// Whether the destination may share the source's blocks (btrfs, XFS).
    public enum Reflink: Sendable, Hashable {
        case never
        /// Where the file system can; a copy otherwise. A file of at most
        /// `IO.smallFileLimit` bytes is copied (`.chain`), not cloned.
        case auto
        /// Or fail (`.copy`, with the ioctl's errno, such as `EOPNOTSUPP` or `EXDEV`).
        case always
    }

    /// Holes in the destination.
    public enum Sparse: Sendable, Hashable {
        /// The source's holes stay holes (`SEEK_DATA`).
        case auto
        /// Holes are written as zeros.
        case never
        /// The source's holes, and every 4 KiB block of zeros, become holes (channels).
        case always
    }

    /// What a copy did.
    public struct Outcome: Sendable, Hashable {
        /// The bytes copied (holes included).
        public var bytes: Int64
        /// How they moved.
        public var strategy: Strategy
        /// How the destination was replaced (`.inPlace` for a FIFO or a
        /// device, or where `inPlaceIfNoTemporary` applied).
        public var replace: Replace

        /// An outcome; `FileCopier.copy` makes them.
        public init(bytes: Int64, strategy: Strategy, replace: Replace) {
            self.bytes = bytes
            self.strategy = strategy
            self.replace = replace
        }
    }

    /// How an existing destination is replaced; `.atomic` by default.
    public var replace: Replace = .atomic
    /// Fail with `EEXIST` when the destination exists.
    public var exclusive = false
    /// A new file's permission bits, before the umask; `nil` takes the source's.
    public var permissions: FilePermissions?
    /// Whether a new file takes the source's set-user-ID, set-group-ID and
    /// sticky bits along with its permission bits, where `permissions` is
    /// nil (`true` by default; `cp` without `-p` leaves them out: `false`).
    public var copiesSpecialModeBits = true
    /// The source's metadata the new file also takes (`[]`: none beyond
    /// the permission bits under the umask), set on the open file before it
    /// is closed and renamed into place.
    public var preserve: IO.CopyOptions.Preserved = []
    /// How the bytes move; `.automatic` by default.
    public var strategy: Strategy = .automatic
    public var reflink: Reflink = .never
    public var sparse: Sparse = .auto
    public var sync: Sync = .none
    /// The channels use `O_DIRECT` where the file systems allow it (implies `.channels`).
    public var directIO = false
    /// With `.atomic`, where no file may be made beside the destination
    /// (`EACCES`, `EPERM`: a directory the caller cannot write) but the
    /// destination itself is writable, write it in place (as `cp` does).
    public var inPlaceIfNoTemporary = false
    /// Called with the bytes of each piece once written (from the engine's
    /// thread or an `IOQueue`: keep it short). The pieces add up to `Outcome.bytes`.
    public var progress: (@Sendable (Int) -> Void)?
    /// The engine the copy's requests go to; `IOEngine.shared` unless set.
    /// A copy that never needs it (a small regular file, copied by plain
    /// system calls) never touches it, so a copier made with `init()` never
    /// creates the shared engine (its ring and ring thread) for such files.
    public var engine: IOEngine {
        get { chosenEngine ?? .shared }
        set { chosenEngine = newValue }
    }
    private var chosenEngine: IOEngine?

    /// A copier with the defaults: atomic replace, no flush, strategy chosen
    /// per file, on `IOEngine.shared` (created only once a copy needs it).
    public init() {
        chosenEngine = nil
    }

    /// A copier with the defaults, on `engine`.
    public init(engine: IOEngine) {
        chosenEngine = engine
    }

    /// Copies the file at `source` to `destination`.
    ///
    /// The destination is compared with the source (device and inode)
    /// before anything is truncated: a copy onto the source itself, or a
    /// hard link or symlink to it, is refused (`EINVAL`, `.copyOntoSource`).
    ///
    /// - Throws: an `IOError` naming the operation, the path and the side:
    ///   `EINVAL` for an empty path or the same file on both sides, `EISDIR`
    ///   for a directory source, `EEXIST` with `exclusive`, `.copy` for
    ///   `reflink: .always` that cannot; the stat, open, read, write, sync,
    ///   close or rename error; `ECANCELED` when the task is cancelled. A
    ///   file the copy created is removed when it fails; under `.atomic` the
    ///   destination is then as it was.
    @discardableResult
    public func copy(from source: FilePath, to destination: FilePath) async throws(IOError) -> Outcome {
        try await copy(from: source, to: destination, sourceIsRegular: false)
    }

    /// Copies the file at `source` to `destination` as `copy(from:to:)`
    /// does, for a caller that has just found what the source is (its own
    /// `lstat`, a directory listing's entry type): a regular file is opened
    /// with no stat of its path first. The open file is still checked
    /// (`fstat`), so a source replaced meanwhile by something else is
    /// copied as what it now is; only a FIFO put there in that moment would
    /// hold a worker of `IOQueue.global` in its open until a writer came.
    /// Any other `sourceType` copies as `copy(from:to:)`.
    ///
    /// `ringcp -r` and `IO.copyItem` copy each file of a tree this way, with
    /// the type their walk found.
    ///
    /// - Throws: as `copy(from:to:)`.
    @discardableResult
    public func copy(from source: FilePath, to destination: FilePath, sourceType: FileType) async throws(IOError)
        -> Outcome {
        try await copy(from: source, to: destination, sourceIsRegular: sourceType == .regular)
    }

    package func copy(from source: FilePath, to destination: FilePath, sourceIsRegular: Bool) async throws(IOError)
        -> Outcome {
        let source = try IO.absolute(source).mapError { IOError(.openForReading, path: source, side: .source, errno: $0) }.get()
        let destination = try IO.absolute(destination).mapError {
            IOError(.openForWriting, path: destination, side: .destination, errno: $0)
        }.get()
        var atomic = replace == .atomic
        while true {
            var paths: PathRequest.Paths
            if atomic {
                do throws(Errno) {
                    paths = PathRequest.Paths(source: source, replacing: try AtomicReplace(replacing: destination,
                                                                                            noReplace: exclusive))
                } catch {
                    throw IOError(.create, path: destination, side: .destination, errno: error)
                }
            } else {
                paths = PathRequest.Paths(source: source, inPlace: destination)
            }
            let created = atomic || exclusive
            var pair: PathRequest.Pair
            // Regular files: the whole small copy on one pool worker
            // (SmallFileCopy.swift), or both opened there for the general
            // path; anything else (a FIFO, a device) opened through the engine.
            switch await SmallFileCopy.blocking(paths, permissions: permissions, createNew: created, request: request,
                                                preserve: preserve, sync: sync == .beforeRename, readable: directIO,
                                                sourceIsRegular: sourceIsRegular, modeMask: modeMask) {
            case .copied(let bytes):
                progress?(Int(bytes))
                return Outcome(bytes: bytes, strategy: .chain, replace: atomic ? .atomic : .inPlace)
            case .failed(let error):
                if atomic && inPlaceIfNoTemporary && error.side == .destination && error.operation == .create
                    && (error.errno == .permissionDenied || error.errno == .notPermitted) {
                    atomic = false
                    continue
                }
                throw error
            case .notSmall(let opened):
                pair = opened
            case .changed, nil:
                // Not regular files (nothing was opened), or a source that
                // grew while read (both closed, the new file removed): by
                // the engine's opens.
                pair = try await PathRequest.openPair(engine: engine, paths, permissions: permissions, createNew: created,
                                                      readable: directIO, modeMask: modeMask)
            }
            // A FIFO, a device or a socket on either side: in place, never renamed over.
            if atomic && (pair.info.kind != .regular || (pair.destinationKind.map { $0 != .regular } ?? false)) {
                Syscall.closeIgnoringErrors(pair.output)
                paths.atomic?.abandon()
                let output = try await openInPlace(destination, sourceMode: pair.info.mode, input: pair.input)
                pair = PathRequest.Pair(info: pair.info, input: pair.input, output: output)
                atomic = false
                paths = PathRequest.Paths(source: source, inPlace: destination)
            }
            let (input, output) = (pair.input, pair.output)
            var closed = false
            do throws(IOError) {
                defer {
                    if !closed {
                        Syscall.closeIgnoringErrors(input)
                        Syscall.closeIgnoringErrors(output)
                    }
                }
                let (bytes, how) = try await transfer(input, output, pair.info, paths)
                if !preserve.isEmpty {
                    do throws(Errno) {
                        try AttributeCopy.apply(preserve, from: try Syscall.fstat(input), to: output)
                    } catch {
                        throw IOError(.setAttributes, path: destination, side: .destination, errno: error)
                    }
                }
                closed = true
                Syscall.closeIgnoringErrors(input)
                do throws(Errno) { try Syscall.close(output) } catch {
                    throw IOError(.close, path: destination, side: .destination, errno: error)
                }
                if let replace = paths.atomic {
                    do throws(Errno) { try await replace.commit(engine: engine) } catch {
                        throw IOError(.rename, path: destination, side: .destination, errno: error)
                    }
                }
                return Outcome(bytes: bytes, strategy: how, replace: atomic ? .atomic : .inPlace)
            } catch {
                if atomic || exclusive || pair.created { try? Syscall.unlink(paths.target) }
                throw error
            }
        }
    }

    /// The bits of the source's mode a new file takes.
    var modeMask: CModeT { copiesSpecialModeBits ? 0o7777 : 0o777 }

    /// What chooses the plan's steps.
    var request: CopyPlan.Request {
        CopyPlan.Request(strategy: strategy, reflink: reflink, sparse: sparse, directIO: directIO)
    }

    /// The destination opened to be written where it is (a FIFO's open
    /// waits for its reader): created if missing, truncated if a regular
    /// file. Closes `input` if it fails.
    private func openInPlace(_ destination: FilePath, sourceMode: UInt32, input: Int32) async throws(IOError) -> Int32 {
        let mode = permissions?.rawValue ?? CModeT(sourceMode & 0o7777) & modeMask
        let memory = RequestMemory(paths: [destination])
        let flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | (exclusive ? O_EXCL : 0)
        let output = await memory.perform(engine: engine, .openat(directory: AT_FDCWD, path: memory.paths[0], flags: flags,
                                                                  mode: UInt32(mode)), mayBlock: true)
        if output < 0 {
            Syscall.closeIgnoringErrors(input)
            throw IOError(exclusive ? .create : .openForWriting, path: destination, side: .destination,
                          errno: Errno(rawValue: -output))
        }
        if let info = try? Syscall.fstat(output), info.type == .regular {
            do throws(Errno) { try Syscall.ftruncate(output, to: 0) } catch {
                Syscall.closeIgnoringErrors(input)
                Syscall.closeIgnoringErrors(output)
                throw IOError(.write, path: destination, side: .destination, errno: error)
            }
        }
        return output
    }
}
