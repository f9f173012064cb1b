#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine
import RingIOChannel
import RingIOCopy

extension IO {
    /// The most bytes `readFile(at:maximumSize:engine:)` returns unless told
    /// otherwise: 256 MiB.
    public static let defaultMaximumFileSize = 256 << 20

    /// The whole file at `path`, at most `maximumSize` bytes of it.
    ///
    /// A relative `path` is resolved against the current directory at the
    /// call. A file larger than `maximumSize` (or a device or pipe that
    /// gives more, such as `/dev/zero`) fails with `EFBIG` after reading at
    /// most `maximumSize + 1` bytes; pass a larger limit, or read with
    /// ``IOChannel/chunks(offset:length:)`` to stream a file of any size.
    ///
    /// A regular file of up to 256 KiB whose path and bytes are cached is
    /// read on the calling thread, without waiting for the device and
    /// without suspending; otherwise with one linked chain through the
    /// engine (open, read, close: one submission, one completion; one more
    /// read past 64 KiB), or, for a larger file or one that is not regular,
    /// through a channel.
    ///
    /// ```swift
    /// let config = try await IO.readFile(at: "config.json", maximumSize: 1 << 20)
    /// ```
    ///
    /// - Parameters:
    ///   - path: the file to read.
    ///   - maximumSize: the most bytes accepted (default
    ///     ``defaultMaximumFileSize``, 256 MiB).
    ///   - engine: the engine that runs the reads.
    /// - Throws: an ``IOError``: `.openForReading` with the open error
    ///   (`ENOENT`, `EACCES`, `EISDIR`, `EINVAL` for an empty path, ...);
    ///   `.read` with the read error, `EFBIG` past `maximumSize`, or
    ///   `ECANCELED` when the task is cancelled.
    public static func readFile(at path: FilePath, maximumSize: Int = defaultMaximumFileSize,
                                engine: IOEngine = .shared) async throws(IOError) -> DataChunk {
        let path = try absolute(path).mapError { IOError(.openForReading, path: path, errno: $0) }.get()
        let limit = Swift.max(maximumSize, 0)
        if Task.isCancelled { throw IOError(.read, path: path, errno: .canceled) }
        // A small regular file: read at once where nothing has to wait for
        // the device, else one linked chain through the engine
        // (SmallFileRead.swift, SmallFileRead+Chain.swift).
        let outcome: SmallFileRead.Outcome
        switch SmallFileRead.attemptInline(path, maximumSize: limit, keepOpen: true) {
        case .bytes(let bytes): return bytes
        case .opened(let fd, let size): outcome = await SmallFileRead.readOpened(fd: fd, size: size, path, engine: engine)
        case .none: outcome = await SmallFileRead.read(path, maximumSize: limit, engine: engine)
        }
        switch outcome {
        case .done(let bytes): return bytes
        case .failed(let error): throw error
        case .general: break
        case .partial(let prefix, let fd): return try await readRest(of: fd, after: prefix, path, limit: limit, engine: engine)
        }
        let channel = try IOChannel(kind: .stream, path: path, mode: .readOnly, queue: .global, engine: engine)
        defer { channel.close() }
        let bytes: DataChunk
        do throws(Errno) {
            bytes = try await channel.read(length: limit == .max ? .max : limit + 1)
        } catch {
            throw IOError(channel.core.pathFailure != nil ? .openForReading : .read, path: path, errno: error)
        }
        guard bytes.count <= limit else {
            throw IOError(.read, path: path, errno: .fileTooLarge,
                          detail: "more than the maximum size of \(limit) bytes")
        }
        return bytes
    }

    /// The rest of a FIFO or device whose first bytes the small-file chain
    /// took: a stream channel on the same fd, which it closes.
    private static func readRest(of fd: Int32, after prefix: DataChunk, _ path: FilePath, limit: Int,
                                 engine: IOEngine) async throws(IOError) -> DataChunk {
        let channel = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: fd), queue: .global,
                                engine: engine, cleanup: { _ in Syscall.closeIgnoringErrors(fd) })
        defer { channel.close() }
        let rest: DataChunk
        do throws(Errno) {
            rest = try await channel.read(length: limit == .max ? .max : limit + 1 - prefix.count)
        } catch {
            throw IOError(.read, path: path, errno: error)
        }
        guard prefix.count + rest.count <= limit else {
            throw IOError(.read, path: path, errno: .fileTooLarge,
                          detail: "more than the maximum size of \(limit) bytes")
        }
        return prefix + rest
    }

    /// Writes `data` to the file at `path`, creating or replacing it.
    ///
    /// A relative `path` is resolved against the current directory at the
    /// call. With `atomically` (the default) the bytes go to a new file
    /// beside `path`, which is flushed (`fsync`) and then renamed over
    /// `path`: readers see the old contents or the new, never a mix, and a
    /// failure leaves `path` as it was. Otherwise `path` is truncated and
    /// written in place.
    ///
    /// - Throws: an ``IOError`` naming the step that failed and its file
    ///   (the temporary file for `.openForWriting`, `.write` and
    ///   `.synchronize` when `atomically`; `path` for `.rename`).
    public static func writeFile(_ data: DataChunk, to path: FilePath, atomically: Bool = true,
                                 permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
                                 engine: IOEngine = .shared) async throws(IOError) {
        let path = try absolute(path).mapError { IOError(.openForWriting, path: path, errno: $0) }.get()
        let replace: AtomicReplace?
        do throws(Errno) { replace = atomically ? try AtomicReplace(replacing: path) : nil } catch {
            throw IOError(.openForWriting, path: path, errno: error)
        }
        let target = replace?.temporary ?? path
        // Temporaries of earlier writers killed before their rename: the
        // first write of this process into the directory looks for them.
        if atomically { removeStaleTemporaries(beside: path, onlyOncePerDirectory: true) }
        let options: FileDescriptor.OpenOptions = atomically ? [.create, .exclusiveCreate] : [.create, .truncate]
        let channel = try IOChannel(kind: .stream, path: target, mode: .writeOnly, options: options,
                                    permissions: permissions, queue: .global, engine: engine)
        defer { channel.close() }
        var step = IOError.Operation.write
        do throws(Errno) {
            try await channel.write(data: data)
            if let replace {
                step = .synchronize
                try await channel.synchronize()
                step = .rename
                try replace.commit()
            }
        } catch {
            replace?.abandon()
            if channel.core.pathFailure != nil { step = .openForWriting }
            throw IOError(step, path: step == .rename ? path : target, errno: error)
        }
    }
}
