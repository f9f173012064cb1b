#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

/// A channel for reading and writing a file descriptor: RingIO's `dispatch_io_t`.
///
/// A *stream* channel runs its operations one after another at the file
/// position, which moves; a *random* channel reads and writes at offsets
/// relative to where the file position was when the channel was made, never
/// moves it, and runs several operations at once. Channels of one file
/// descriptor share their ordering, their barriers and their cleanup.
///
/// Handlers run on the `IOQueue` given to `read` or `write`; the calls of one
/// operation never overlap. A read handler gets `(done, data, error)`:
///
/// | call                        | meaning                                             |
/// |-----------------------------|-----------------------------------------------------|
/// | `(false, bytes, nil)`       | bytes read since the last call (by the water marks) |
/// | `(true, lastBytes, nil)`    | the length was reached; these are the last bytes    |
/// | `(true, empty, nil)`        | end of file (after any remaining bytes)             |
/// | `(true, nil, error)`        | failed or cancelled; earlier calls had the bytes    |
///
/// A write handler gets the bytes still to be written: `(false, rest, nil)` as
/// it goes, `(true, nil, nil)` when all are written, `(true, rest, error)` on
/// failure.
///
/// Requests go to an `IOEngine` (io_uring, or its thread-pool fallback). On
/// regular files each operation keeps several 1 MiB requests in flight and
/// reads into pooled buffers that become `DataChunk` regions without a copy;
/// at most a bounded number of bytes are in flight or waiting for the handler,
/// so a slow handler slows reading down instead of growing memory.
public final class IOChannel: Sendable {
    /// How a channel addresses the file.
    public enum Kind: Sendable, Hashable {
        /// Operations run in order at the file position (pipes, sockets, ttys, files).
        case stream
        /// Operations run at offsets, several at once (seekable files only).
        case random
    }

    /// An operation's handler: see the table in the type's documentation.
    public typealias Handler = @Sendable (_ done: Bool, _ data: DataChunk?, _ error: Errno?) -> Void

    /// The size of one request, and the default delivery size on files.
    public static let chunkSize = 1 << 20

    package let core: ChannelCore

    /// The channel's kind.
    public var kind: Kind { core.kind }

    /// A channel on an open file descriptor, which the caller keeps owning:
    /// close it in `cleanup`, which runs once every channel of the fd has
    /// closed and every handler has returned.
    ///
    /// Returns at once. If `fileDescriptor` is unusable (closed: `EBADF`; a
    /// directory: `EISDIR`; a pipe or socket for a random channel: `ESPIPE`),
    /// `cleanup` runs at once with the error and every operation fails with it.
    public init(kind: Kind, fileDescriptor: FileDescriptor, queue: IOQueue, engine: IOEngine = .shared,
                cleanup: @escaping @Sendable (Errno?) -> Void = { _ in }) {
        core = ChannelCore(kind: kind, target: ChannelCore.target(fd: fileDescriptor.rawValue, kind: kind),
                           queue: queue, engine: engine, cleanup: cleanup)
    }

    /// A channel on an open file descriptor, with no cleanup handler: as
    /// ``init(kind:fileDescriptor:queue:engine:cleanup:)`` with one that does
    /// nothing, except that closing it submits nothing to `queue`.
    public init(kind: Kind, fileDescriptor: FileDescriptor, queue: IOQueue, engine: IOEngine = .shared) {
        core = ChannelCore(kind: kind, target: ChannelCore.target(fd: fileDescriptor.rawValue, kind: kind),
                           queue: queue, engine: engine, cleanup: nil)
    }

    /// A channel on the file at `path`, opened before the first operation
    /// (or barrier) runs and closed before `cleanup` runs.
    ///
    /// A relative `path` is resolved against the current directory now: a
    /// later `chdir` does not change which file the channel names. The path
    /// is checked at once, asynchronously (with `.create` and no file: its
    /// directory; a read-only channel's first read, when it comes within a
    /// millisecond, checks it by opening it); a check or open error (`ENOENT`, `EACCES`, `EISDIR`,
    /// ...) goes to `cleanup` and to every operation as an `Errno`, and
    /// ``openError`` then holds it with the path and the operation.
    ///
    /// Under fd pressure an idle path channel may close its descriptor and
    /// open the path again on its next operation: never truncating,
    /// creating or refusing (`.exclusive`) the file then, at the same stream
    /// position, and failing with `ESTALE` if the path names another file
    /// by then. Reading ``fileDescriptor`` keeps the descriptor open.
    ///
    /// - Throws: an ``IOError`` with `Errno.invalidArgument` for an empty
    ///   path, or `getcwd`'s error for a relative path when the current
    ///   directory is gone.
    public init(kind: Kind, path: FilePath, mode: FileDescriptor.AccessMode,
                options: FileDescriptor.OpenOptions = [], permissions: FilePermissions? = nil,
                queue: IOQueue, engine: IOEngine = .shared,
                cleanup: @escaping @Sendable (Errno?) -> Void = { _ in }) throws(IOError) {
        core = try Self.pathCore(kind: kind, path: path, mode: mode, options: options, permissions: permissions,
                                 queue: queue, engine: engine, cleanup: cleanup)
    }

    /// A channel on the file at `path`, with no cleanup handler: as
    /// ``init(kind:path:mode:options:permissions:queue:engine:cleanup:)``
    /// with one that does nothing, except that closing it submits nothing to
    /// `queue` (no worker is woken to run an empty closure).
    public init(kind: Kind, path: FilePath, mode: FileDescriptor.AccessMode,
                options: FileDescriptor.OpenOptions = [], permissions: FilePermissions? = nil,
                queue: IOQueue, engine: IOEngine = .shared) throws(IOError) {
        core = try Self.pathCore(kind: kind, path: path, mode: mode, options: options, permissions: permissions,
                                 queue: queue, engine: engine, cleanup: nil)
    }

    private static func pathCore(kind: Kind, path: FilePath, mode: FileDescriptor.AccessMode,
                                 options: FileDescriptor.OpenOptions, permissions: FilePermissions?,
                                 queue: IOQueue, engine: IOEngine,
                                 cleanup: (@Sendable (Errno?) -> Void)?) throws(IOError) -> ChannelCore {
        let resolved: FilePath
        switch IO.absolute(path) {
        case .success(let absolute): resolved = absolute
        case .failure(let error): throw IOError(IOChannel.openOperation(mode), path: path, errno: error)
        }
        return ChannelCore(kind: kind, path: PathSpec(path: resolved, mode: mode, options: options,
                                                      permissions: permissions),
                           queue: queue, engine: engine, cleanup: cleanup)
    }

    /// The absolute path of a path channel (a relative one as resolved at
    /// creation); `nil` for a channel on a file descriptor.
    public var path: FilePath? { core.pathSpec?.path }

    /// Why a path channel could not check or open its file, with the path:
    /// "Unable to open '/x/y' for reading: No such file or directory
    /// (ENOENT)". `nil` while the channel works, and for fd channels.
    ///
    /// Handlers and `cleanup` receive the bare `Errno` (as libdispatch's do);
    /// read this property from them for the whole story.
    public var openError: IOError? {
        guard let spec = core.pathSpec, let error = core.pathFailure else { return nil }
        return IOError(IOChannel.openOperation(spec.mode), path: spec.path, errno: error, detail: core.pathFailureDetail)
    }

    static func openOperation(_ mode: FileDescriptor.AccessMode) -> IOError.Operation {
        switch mode {
        case .readOnly: .openForReading
        case .writeOnly: .openForWriting
        default: .open
        }
    }

    /// A channel on the same file as `channel`, with new settings.
    ///
    /// From an fd channel it shares that fd's ordering, barriers and cleanup
    /// (a random channel's offsets count from the file position now); from a
    /// path channel it opens the path again. If `channel` is closed, `cleanup`
    /// gets `ECANCELED` at once.
    public init(kind: Kind, channel: IOChannel, queue: IOQueue, engine: IOEngine = .shared,
                cleanup: @escaping @Sendable (Errno?) -> Void = { _ in }) {
        core = Self.derivedCore(kind: kind, channel: channel, queue: queue, engine: engine, cleanup: cleanup)
    }

    /// A channel on the same file as `channel`, with no cleanup handler: as
    /// ``init(kind:channel:queue:engine:cleanup:)`` with one that does
    /// nothing, except that closing it submits nothing to `queue`.
    public init(kind: Kind, channel: IOChannel, queue: IOQueue, engine: IOEngine = .shared) {
        core = Self.derivedCore(kind: kind, channel: channel, queue: queue, engine: engine, cleanup: nil)
    }

    private static func derivedCore(kind: Kind, channel: IOChannel, queue: IOQueue, engine: IOEngine,
                                    cleanup: (@Sendable (Errno?) -> Void)?) -> ChannelCore {
        let (target, path) = channel.core.derive(kind: kind)
        if let path {
            return ChannelCore(kind: kind, path: path, queue: queue, engine: engine, cleanup: cleanup)
        }
        return ChannelCore(kind: kind, target: target ?? .failed(.canceled), queue: queue, engine: engine,
                           cleanup: cleanup)
    }

    deinit {
        // Releasing the last reference acts as close: operations already
        // submitted finish normally (they keep the channel's state alive).
        core.close(stop: false)
    }

    /// Reads `length` bytes (`Int.max`: to the end of the file) at `offset`
    /// (random channels; stream channels read at the file position).
    ///
    /// On a random channel, cached bytes of a regular file (up to 256 KiB,
    /// nothing queued ahead of the read on its descriptor, delivered in one
    /// call) are read on the calling thread, and the one handler call is
    /// queued on `queue`: never made inside this call.
    public func read(offset: Int64 = 0, length: Int, queue: IOQueue, handler: @escaping Handler) {
        // Cached bytes of a regular file, read on a random channel with
        // nothing ahead of them: read here, the handler queued (one hop).
        var options = OperationOptions()
        switch core.readNow(offset: offset, length: length, queue: queue, handler: handler) {
        case .read: return
        case .submit(let skipInlineTry): options.skipInlineTry = skipInlineTry
        }
        core.submit(direction: .read, offset: offset, length: Swift.max(length, 0), data: .empty,
                    queue: queue, options: options, handler: handler)
    }

    /// Writes `data` at `offset` (random channels; stream channels write at
    /// the file position). A discontiguous chunk goes out with vectored
    /// writes, without a flattening copy.
    public func write(offset: Int64 = 0, data: DataChunk, queue: IOQueue, handler: @escaping Handler) {
        core.submit(direction: .write, offset: offset, length: data.count, data: data, queue: queue, handler: handler)
    }

    /// Runs `work` on the channel's queue after every earlier operation of
    /// every channel of this file has finished; no later one starts until
    /// `work` returns. `fsync`, `lseek` and the like are fine inside;
    /// closing the fd is not.
    public func barrier(_ work: @escaping @Sendable () -> Void) {
        core.barrier(work)
    }

    /// Closes the channel: later operations fail with `.canceled`; those
    /// already submitted finish normally, or, with `stop`, are cancelled (in
    /// the kernel where they are in flight) and end with `.canceled` after
    /// delivering what they had. Closing twice is harmless.
    public func close(stop: Bool = false) {
        core.close(stop: stop)
    }

    /// The most bytes one handler call delivers (default `Int.max`; 0 means 1).
    /// Lowers the low-water mark to it if needed. Operations already made keep
    /// their settings.
    public func setHighWater(_ bytes: Int) { core.setHighWater(bytes) }

    /// The fewest bytes a handler call delivers before the end (default: one
    /// chunk on files, what each read returns on pipes and sockets). Raises
    /// the high-water mark to it if needed.
    public func setLowWater(_ bytes: Int) { core.setLowWater(bytes) }

    /// Delivers every `interval` too: with `strict`, whatever is buffered,
    /// even nothing; otherwise only if the low-water mark is reached.
    public func setInterval(_ interval: Duration, strict: Bool = false) { core.setInterval(interval, strict: strict) }

    /// The file descriptor; `nil` before a path channel has opened its file,
    /// while it has let go of it (idle, under fd pressure), and after close.
    /// A path channel whose descriptor this returned keeps it until closed.
    public var fileDescriptor: FileDescriptor? { core.fileDescriptor }
}

/// One-shot reads and writes: RingIO's `dispatch_read` and `dispatch_write`.
public enum IO {
    /// Reads up to `length` bytes from `fd` at its file position and calls
    /// `handler` once with all of them (up to `length` or the end of the
    /// file; on a pipe or socket, what is there once the first bytes arrive).
    /// A failure passes the bytes read before it and the error.
    public static func read(from fd: FileDescriptor, length: Int, queue: IOQueue, engine: IOEngine = .shared,
                            handler: @escaping @Sendable (_ data: DataChunk, _ error: Errno?) -> Void) {
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let collected = Locked(DataChunk.empty)
        channel.core.submit(direction: .read, offset: 0, length: Swift.max(length, 0), data: .empty, queue: queue,
                            options: OperationOptions(endAfterFirstBytes: true)) { done, data, error in
            let all = collected.withLock { acc -> DataChunk in
                if let data { acc = acc.concat(data) }
                return acc
            }
            if done { handler(all, error) }
        }
        channel.close()
    }

    /// Writes `data` to `fd` at its file position and calls `handler` once:
    /// `(nil, nil)` when all is written, `(unwritten, error)` otherwise.
    public static func write(to fd: FileDescriptor, data: DataChunk, queue: IOQueue, engine: IOEngine = .shared,
                             handler: @escaping @Sendable (_ unwritten: DataChunk?, _ error: Errno?) -> Void) {
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        channel.write(data: data, queue: queue) { done, rest, error in
            if done { handler(rest, error) }
        }
        channel.close()
    }
}

extension IO {
    /// `path` as an absolute path: a relative one is resolved against the
    /// current directory now, so a later `chdir` does not change which file
    /// it names. Not normalized (`..` stays for the kernel to resolve).
    ///
    /// - Returns: `EINVAL` for an empty path; `getcwd`'s error (`ENOENT`
    ///   when the current directory was removed).
    package static func absolute(_ path: FilePath) -> Result<FilePath, Errno> {
        if path.isEmpty { return .failure(.invalidArgument) }
        if path.isAbsolute { return .success(path) }
        return Result { () throws(Errno) in try Syscall.getcwd().pushing(path) }
    }
}
