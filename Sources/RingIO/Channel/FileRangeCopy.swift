#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase

extension IO {
    /// `copy_file_range(2)`, from the C library (the Glibc module leaves it out).
    private typealias CopyFileRange = @convention(c) (Int32, UnsafeMutablePointer<Int64>?, Int32,
                                                      UnsafeMutablePointer<Int64>?, Int, UInt32) -> Int
    private static let copyFileRangeFunction: CopyFileRange? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "copy_file_range") else { return nil }
        return unsafeBitCast(symbol, to: CopyFileRange.self)
    }()

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
        cliburing_fs_type(destination) == ext4Magic
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
            if cliburing_fallocate(destination, 0, range.lowerBound, Int64(range.count)) != 0 { return false }
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
        guard let function = copyFileRangeFunction else { throw IOError(.copy, path: nil, errno: .noFunction) }
        let (input, output) = (source.rawValue, destination.rawValue)
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
                    let (n, error) = await withUnsafeContinuation { (continuation: UnsafeContinuation<(Int, Errno), Never>) in
                        IOQueue.global.async {
                            var inOffset = at, outOffset = at
                            let n = function(input, &inOffset, output, &outOffset, length, 0)
                            continuation.resume(returning: (n, Errno(rawValue: errno)))
                        }
                    }
                    if n < 0 {
                        if error == .interrupted { continue }
                        return shared.withLock { s in
                            guard s.failure == nil else { return }
                            if s.moved == 0 && [.improperLink, .invalidArgument, .notSupported, .noFunction].contains(error) {
                                s.failure = IOError(.copy, path: nil, errno: error)
                            } else {
                                let write = [.noSpace, .diskQuotaExceeded, .fileTooLarge, .readOnlyFileSystem, .ioError]
                                    .contains(error)
                                s.failure = write ? IOError(.write, path: nil, side: .destination, errno: error)
                                    : IOError(.read, path: nil, side: .source, errno: error)
                            }
                        }
                    }
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
}
