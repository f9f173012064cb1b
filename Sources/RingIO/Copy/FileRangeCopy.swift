#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOChannel
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

extension IO {
    /// ext2, ext3 and ext4's `f_type` (`EXT4_SUPER_MAGIC`).
    private static let ext4Magic: Int64 = 0xEF53

    /// Whether blocks are best reserved (`preallocate`) before `destination`
    /// is written: on ext4, where `copy_file_range` is a splice inside the
    /// kernel and each 4 KiB block written into a hole costs a delayed
    /// allocation (a reservation, quota, an extent-status entry), writing
    /// into blocks allocated beforehand in one call took 0.77× cp's time
    /// and CPU for 1 GiB (cp: 1.0). Elsewhere no: a file system that shares
    /// extents (btrfs, XFS) would allocate blocks only to drop them for the
    /// clone, and tmpfs gained nothing.
    static func preallocationHelps(_ destination: Int32) -> Bool {
        (try? Syscall.fileSystemType(destination)) == ext4Magic
    }

    /// Allocates `ranges` of `destination` (`fallocate(2)`, mode 0: the
    /// blocks read as zeros and the size grows to cover them), stopping at
    /// the first failure. Only an optimization: a failure (`ENOSPC`,
    /// `EOPNOTSUPP`) is left for the writes that follow to report, and a
    /// range allocated by then reads as zeros until written.
    /// - Returns: whether every range was allocated.
    @discardableResult
    static func preallocate(_ destination: Int32, _ ranges: [Range<Int64>]) -> Bool {
        for range in ranges where !range.isEmpty {
            if (try? Syscall.fallocate(destination, offset: range.lowerBound, length: Int64(range.count))) == nil { return false }
        }
        return true
    }

    /// Copies `ranges` of `source` to the same offsets in `destination`
    /// inside the kernel with `copy_file_range(2)`, as GNU cp does: one
    /// system call per `chunk` bytes, each run on `IOQueue.global` (it
    /// blocks while the kernel copies), no pipe, no bytes in the process.
    /// Where the file system shares blocks (btrfs, XFS) the kernel may
    /// reflink. On ext4 here it took about cp's time for 1 GiB, where
    /// `copyRanges`' splices (which io_uring runs on its io-wq workers)
    /// took about three times the system time.
    ///
    /// `progress` is called with the bytes of each chunk once copied.
    ///
    /// - Returns: where the source ended, if it ended before the last range
    ///   did (it shrank under the copy); `nil` otherwise.
    /// - Throws: an `IOError` (no path: the files are given as descriptors):
    ///   `.copy` with `EXDEV`, `EINVAL`, `EOPNOTSUPP` or `ENOSYS` when these
    ///   files cannot be copied so and nothing was (use `copyRanges`);
    ///   otherwise `.write` on the `.destination` side for `ENOSPC`,
    ///   `EDQUOT`, `EFBIG`, `EROFS`, `EIO`, and `.read` on the `.source`
    ///   side for the rest; `ECANCELED` when the task is cancelled (seen
    ///   between chunks).
    @discardableResult
    public static func copyFileRange(_ ranges: [Range<Int64>], from source: FileDescriptor,
                                     to destination: FileDescriptor, chunk: Int = 64 << 20,
                                     progress: @escaping @Sendable (Int) -> Void = { _ in }) async throws(IOError) -> Int64? {
        try await copyFileRange(ranges, from: source, to: destination, chunk: chunk, lanes: 1, progress: progress)
    }

    /// `copyFileRange` with `lanes` chunks copied at once, each by its own
    /// call on `IOQueue.global`. On ext4, which copies by splicing inside
    /// the kernel, the writes of all lanes queue on the destination's inode
    /// lock: two or four lanes took about the wall time of one and twice
    /// its CPU (1 GiB, 8 interleaved rounds), so `FileCopier` runs one.
    static func copyFileRange(_ ranges: [Range<Int64>], from source: FileDescriptor, to destination: FileDescriptor,
                              chunk: Int, lanes: Int,
                              progress: @escaping @Sendable (Int) -> Void) async throws(IOError) -> Int64? {
        let (input, output) = (source.rawValue, destination.rawValue)
        return try await copyPieces(ranges, chunk: chunk, lanes: lanes, progress: progress) { at, length in
            do throws(Errno) {
                return PieceResult(moved: try Syscall.copyFileRange(from: input, at: at, to: output, at: at, length: length))
            } catch {
                return PieceResult(errno: error)
            }
        }
    }

    /// Copies `ranges` of `source` to the same offsets in `destination`
    /// through one pipe of `pipeSize` bytes, spliced into and out of by
    /// blocking calls on `IOQueue.global` (one call per `chunk` bytes): the
    /// bytes stay in the kernel, as with `copy_file_range`, but move
    /// `pipeSize` at a time. ext4's `copy_file_range` is this loop through
    /// a 64 KiB pipe; through 1 MiB each write takes the inode lock 16
    /// times less often and copies larger folios: 1 GiB in about 0.7× the
    /// CPU (and the time) of the 64 KiB one, where 256 KiB, 2, 4 and 8 MiB
    /// pipes did worse than 1 MiB (one thread; a second, on its own pipe,
    /// only waited on the inode lock).
    ///
    /// - Returns: where the source ended, if it ended before the last range did.
    /// - Throws: as `copyFileRange`, but each error on the side that failed:
    ///   the splice from the source is a `.read`, the one into the
    ///   destination a `.write`; `.copy` with `EINVAL` (or the like) when
    ///   either file cannot splice and nothing was copied; the `pipe2`
    ///   error as a `.copy`.
    static func spliceFileRanges(_ ranges: [Range<Int64>], from source: FileDescriptor, to destination: FileDescriptor,
                                 chunk: Int = 64 << 20, pipeSize: Int = 1 << 20,
                                 progress: @escaping @Sendable (Int) -> Void) async throws(IOError) -> Int64? {
        let pipe: (read: Int32, write: Int32, capacity: Int)
        do throws(Errno) { pipe = try Syscall.pipe(capacity: pipeSize) } catch { throw IOError(.copy, path: nil, errno: error) }
        let (readEnd, writeEnd, capacity) = pipe
        defer {
            Syscall.closeIgnoringErrors(readEnd)
            Syscall.closeIgnoringErrors(writeEnd)
        }
        let (input, output) = (source.rawValue, destination.rawValue)
        // One lane: the pipe is used by one call at a time, and empty between calls.
        return try await copyPieces(ranges, chunk: chunk, lanes: 1, progress: progress) { at, length in
            var done = 0
            while done < length {
                let n: Int
                do throws(Errno) {
                    n = try Syscall.splice(from: input, at: at + Int64(done), to: writeEnd, at: nil,
                                           length: Swift.min(length - done, capacity))
                } catch {
                    return done > 0 ? PieceResult(moved: done) : PieceResult(errno: error, side: .source)
                }
                if n == 0 { break }  // the source ended
                var left = n
                var outOffset = at + Int64(done)
                while left > 0 {
                    let m: Int
                    do throws(Errno) { m = try Syscall.splice(from: readEnd, at: nil, to: output, at: outOffset, length: left) } catch {
                        // What is left in the pipe is lost with it: the copy fails
                        // (what this piece wrote before counts as written).
                        return PieceResult(errno: error, side: .destination, moved: Int(outOffset - at))
                    }
                    if m == 0 { return PieceResult(errno: .ioError, side: .destination, moved: Int(outOffset - at)) }
                    outOffset += Int64(m)
                    left -= m
                }
                done += n
            }
            return PieceResult(moved: done)
        }
    }

    /// What one call of `copyPieces`' work did.
    struct PieceResult: Sendable {
        /// The bytes copied; 0: the source ended.
        var moved = 0
        /// The call failed (`EINTR`: call again).
        var errno: Errno?
        /// The side that failed, where the call says (`copy_file_range` does not).
        var side: IOError.Side?

        init(moved: Int) { self.moved = moved }
        /// A failed call, after `moved` bytes of the piece were written.
        init(errno: Errno, side: IOError.Side? = nil, moved: Int = 0) {
            self.errno = errno
            self.side = side
            self.moved = moved
        }
    }

    /// `ranges` cut into `chunk`-byte pieces, `lanes` at a time, each piece
    /// by calls of `work(offset, length)` on `IOQueue.global` until it is
    /// done, the source ends (0), a call fails, or the task is cancelled
    /// (seen between calls).
    private static func copyPieces(_ ranges: [Range<Int64>], chunk: Int, lanes: Int,
                                   progress: @escaping @Sendable (Int) -> Void,
                                   work: @escaping @Sendable (Int64, Int) -> PieceResult) async throws(IOError) -> Int64? {
        var pieces: [Range<Int64>] = []
        for range in ranges {
            var offset = range.lowerBound
            while offset < range.upperBound {
                let end = Swift.min(offset + Int64(Swift.max(chunk, 1)), range.upperBound)
                pieces.append(offset..<end)
                offset = end
            }
        }
        struct Shared: Sendable {
            var pending: [Range<Int64>]
            var moved: Int64 = 0
            var endedAt: Int64?
            var failure: IOError?
        }
        let shared = Locked(Shared(pending: pieces.reversed()))
        /// One lane: takes the next piece until none is left, the source ended, or a lane failed.
        let lane: @Sendable () async -> Void = {
            while let piece = shared.withLock({ s -> Range<Int64>? in
                s.failure == nil && s.endedAt == nil ? s.pending.popLast() : nil
            }) {
                var offset = piece.lowerBound
                while offset < piece.upperBound {
                    if Task.isCancelled {
                        return shared.withLock { s in
                            if s.failure == nil { s.failure = IOError(.read, path: nil, side: .source, errno: .canceled) }
                        }
                    }
                    let length = Int(piece.upperBound - offset)
                    let at = offset
                    let result = await withUnsafeContinuation { (continuation: UnsafeContinuation<PieceResult, Never>) in
                        IOQueue.global.async { continuation.resume(returning: work(at, length)) }
                    }
                    if let error = result.errno {
                        if error == .interrupted && result.moved == 0 { continue }
                        if result.moved > 0 {
                            // Written before the failure: reported, never lost from the count.
                            shared.withLock { $0.moved += Int64(result.moved) }
                            progress(result.moved)
                        }
                        return shared.withLock { s in
                            guard s.failure == nil else { return }
                            s.failure = failure(error, side: result.side, nothingMoved: s.moved == 0)
                        }
                    }
                    let n = result.moved
                    if n == 0 {  // the source ended early
                        return shared.withLock { $0.endedAt = Swift.min($0.endedAt ?? offset, offset) }
                    }
                    offset += Int64(n)
                    shared.withLock { $0.moved += Int64(n) }
                    progress(n)
                }
            }
        }
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<Swift.max(lanes, 1) { group.addTask(operation: lane) }
        }
        let outcome = shared.withLock { ($0.failure, $0.endedAt) }
        if let failure = outcome.0 { throw failure }
        return outcome.1
    }

    /// The error of a failed call: `.copy` where the files cannot be copied
    /// so and nothing was; otherwise on the side the call named or, where it
    /// cannot say, the destination's for the errors only writes give.
    private static func failure(_ error: Errno, side: IOError.Side?, nothingMoved: Bool) -> IOError {
        if nothingMoved && [.improperLink, .invalidArgument, .notSupported, .noFunction].contains(error) {
            return IOError(.copy, path: nil, errno: error)
        }
        let write = side.map { $0 == .destination }
            ?? [.noSpace, .diskQuotaExceeded, .fileTooLarge, .readOnlyFileSystem, .ioError].contains(error)
        return write ? IOError(.write, path: nil, side: .destination, errno: error)
            : IOError(.read, path: nil, side: .source, errno: error)
    }
}
