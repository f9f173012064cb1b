#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

extension IOChannel {
    /// Whether a channel's file is read and written with direct I/O
    /// (`O_DIRECT`): between the device and RingIO's buffers, bypassing the
    /// page cache.
    ///
    /// With direct I/O on, every request is aligned to the file's direct-I/O
    /// alignment (statx `STATX_DIOALIGN` where the file system reports it,
    /// else the device's logical block size, else the file system's block
    /// size), whatever the user's offsets and lengths:
    ///
    /// - A read covers the aligned blocks around the range and delivers
    ///   exactly the bytes asked for (the chunks are regions of the pooled
    ///   buffers: no copy).
    /// - A write whose start or end is not aligned reads the first or last
    ///   block, puts the new bytes into it and writes the whole block back
    ///   (read-modify-write), and restores the file's length when the last
    ///   block reached past the old end of file. A block wholly past the end
    ///   of file is not read (zeros), so appending works on a write-only fd;
    ///   merging into a block that holds bytes needs the fd open for reading
    ///   too, and fails with `EBADF` on a write-only one. Bytes in memory that are
    ///   not aligned (most `DataChunk`s) are copied into aligned buffers;
    ///   aligned ones (chunks read by a channel) go as they are. Such a write
    ///   runs alone among the operations of its file descriptor, so that two
    ///   writes sharing a block cannot undo each other's bytes.
    public enum DirectIO: Sendable, Hashable {
        /// Buffered I/O through the page cache (the default).
        case off
        /// Direct I/O where the file system supports it. Where it refuses
        /// `O_DIRECT` (`EINVAL`: ramfs, procfs, some FUSE and network file
        /// systems; pipes and sockets), RingIO says so once on stderr
        /// (`RINGIO_QUIET=1` silences it) and the channel goes on buffered.
        case preferred
        /// Direct I/O or nothing: where it cannot be turned on, every later
        /// operation of the channel fails with `EINVAL`.
        case required
    }

    /// Turns direct I/O on or off for the operations submitted after this
    /// call.
    ///
    /// `O_DIRECT` is a flag of the open file description, so the setting
    /// belongs to the file descriptor: it is applied like a barrier (after
    /// every earlier operation of every channel of the descriptor, before
    /// any later one), and every channel of the descriptor then follows it.
    /// A descriptor opened with `O_DIRECT` is read and written aligned from
    /// the start, without this call.
    ///
    /// For a cold copy of a big file:
    /// ```swift
    /// let reader = try IOChannel(kind: .stream, path: source, mode: .readOnly, queue: queue)
    /// let writer = try IOChannel(kind: .stream, path: destination, mode: .writeOnly,
    ///                            options: [.create, .truncate], queue: queue)
    /// reader.setDirectIO(.preferred)
    /// writer.setDirectIO(.preferred)
    /// ```
    public func setDirectIO(_ mode: DirectIO) {
        core.setDirectIO(mode)
    }

    /// Whether the channel's file descriptor is in direct-I/O mode now (false
    /// before a path channel has opened its file, and after close). A
    /// barrier submitted after `setDirectIO` sees its outcome.
    public var isDirect: Bool { core.isDirect }
}

/// What direct I/O on a file must be aligned to: buffer addresses to
/// `memory`, file offsets and lengths to `offset` (powers of two).
struct DirectAlignment: Sendable, Equatable {
    let memory: Int
    let offset: Int

    /// The alignment of `fd`'s file: statx `STATX_DIOALIGN` where reported
    /// (`nil` when it says direct I/O is unsupported), else the logical block
    /// size of a block device, else `st_blksize` (at least 512, a power of
    /// two; 4096 otherwise), which is a multiple of every device's logical
    /// block size it sits on.
    static func of(fd: Int32) -> DirectAlignment? {
        var info = cliburing_statx_t()
        if (try? Syscall.statx(fd, "", flags: cliburing_at_empty_path(), mask: UInt32(STATX_DIOALIGN) | UInt32(STATX_TYPE),
                               into: &info)) != nil,
           info.stx_mask & UInt32(STATX_DIOALIGN) != 0 {
            guard info.stx_dio_offset_align > 0 else { return nil }
            return DirectAlignment(memory: Int(Swift.max(info.stx_dio_mem_align, 1)),
                                   offset: Int(info.stx_dio_offset_align))
        }
        guard let status = try? Syscall.fstat(fd) else { return nil }
        if status.type == .blockSpecial, let size = try? Syscall.logicalBlockSize(fd), size > 0 {
            return DirectAlignment(memory: size, offset: size)
        }
        let size = status.preferredIOBlockSize
        let block = size >= 512 && size & (size - 1) == 0 ? size : 4096
        return DirectAlignment(memory: block, offset: block)
    }
}

/// Says once per process that a file system refused `O_DIRECT`.
enum DirectIONotice {
    private static let said = Atomic<Bool>(false)

    static func refused(fd: Int32, _ error: Errno) {
        guard !said.exchange(true, ordering: .relaxed), getenv("RINGIO_QUIET") == nil else { return }
        let line = "RingIO: direct I/O refused on fd \(fd) (\(error)); going on with buffered I/O\n"
        _ = Array(line.utf8).withUnsafeBytes { try? Syscall.write(2, from: $0) }
    }
}

extension FDEntry {
    /// Sets or clears `O_DIRECT` on the fd (from a barrier: nothing of the
    /// fd runs). Returns the error when the file cannot do direct I/O.
    func switchDirect(on: Bool) -> Errno? {
        guard on else {
            if let flags = try? Syscall.fcntl(fd, F_GETFL), flags & cliburing_o_direct() != 0 {
                _ = try? Syscall.fcntl(fd, F_SETFL, flags & ~cliburing_o_direct())
            }
            setDirectAlignment(nil)
            return nil
        }
        // O_DIRECT on a pipe would turn on its packet mode.
        guard kind.isPositional else { return .invalidArgument }
        let flags: CInt
        do throws(Errno) {
            flags = try Syscall.fcntl(fd, F_GETFL)
            if flags & cliburing_o_direct() == 0 { try Syscall.fcntl(fd, F_SETFL, flags | cliburing_o_direct()) }
        } catch {
            return error
        }
        guard let alignment = DirectAlignment.of(fd: fd) else {
            _ = try? Syscall.fcntl(fd, F_SETFL, flags & ~cliburing_o_direct())
            return .invalidArgument
        }
        setDirectAlignment(alignment)
        return nil
    }
}

extension ChannelCore {
    /// `IOChannel.setDirectIO`: later operations snapshot the mode (a
    /// required mode fails them where direct I/O is off); the fd is switched
    /// in a barrier.
    func setDirectIO(_ mode: IOChannel.DirectIO) {
        setDirectMode(mode)
        barrier { [self] in
            guard let entry = currentEntry else { return }
            if let error = entry.switchDirect(on: mode != .off), mode == .preferred {
                DirectIONotice.refused(fd: entry.fd, error)
            }
        }
    }

    var isDirect: Bool { currentEntry?.directAlignment != nil }
}
