#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOChannel

/// One job of a directory walk: a directory's next batch of entries, read
/// with `getdents64` on the calling (pool) thread.
enum DirectoryReader {
    /// What one job read.
    struct Batch {
        var entries: [DirectoryEntry] = []
        /// The subdirectories among `entries`, for a recursive walk.
        var subdirectories: [DirectoryWalk.Directory] = []
        /// The directory is done with and closed: at its end, gone, or failed.
        var ended = false
        var failure: IOError?
    }

    /// Room left in the buffer below which a job stops calling
    /// `getdents64`: a record is at most 280 bytes (19 of header, a name of
    /// up to 255, a NUL, padding to 8).
    static let smallestRoom = 280

    /// Opens `directory` if it is not open, reads entries until the buffer
    /// is full or the directory ends (closing it then), and parses them.
    ///
    /// A subdirectory that is gone, or is no longer a directory, by the
    /// time it is opened (`ENOENT`, `ENOTDIR`; `ELOOP` from `O_NOFOLLOW`
    /// when a symlink took its place) is skipped: the tree changed under
    /// the walk, as it may. The listed directory itself must open.
    static func readBatch(_ directory: inout DirectoryWalk.Directory, recursive: Bool, bufferSize: Int) -> Batch {
        var batch = Batch()
        if directory.fd < 0 {
            let flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (directory.isRoot ? 0 : O_NOFOLLOW)
            do {
                directory.fd = try Syscall.withPath(directory.opened) { (p) throws(Errno) in
                    try Syscall.openat(AT_FDCWD, p, flags: flags)
                }
            } catch {
                batch.ended = true
                let vanished: Set<Errno> = [.noSuchFileOrDirectory, .notDirectory, .tooManySymbolicLinkLevels]
                if directory.isRoot || !vanished.contains(error) {
                    batch.failure = IOError(.list, path: directory.shown, errno: error)
                }
                return batch
            }
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferSize, alignment: 8)
        defer { buffer.deallocate() }
        var filled = 0
        while bufferSize - filled >= smallestRoom {
            do {
                let n = try Syscall.getdents64(directory.fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]))
                if n == 0 {
                    batch.ended = true
                    break
                }
                filled += n
            } catch .noSuchFileOrDirectory {
                // Removed while open: nothing more to read.
                batch.ended = true
                break
            } catch {
                batch.ended = true
                batch.failure = IOError(.list, path: directory.shown, errno: error)
                Syscall.closeIgnoringErrors(directory.fd)
                return batch
            }
        }
        parse(UnsafeRawBufferPointer(rebasing: buffer[..<filled]), of: directory, recursive: recursive, into: &batch)
        if batch.ended { Syscall.closeIgnoringErrors(directory.fd) }
        return batch
    }

    /// The entries of `records` (`struct linux_dirent64`, one after
    /// another), without `.` and `..`.
    ///
    /// ```
    ///  0        8        16       18     19
    ///  d_ino    d_off    d_reclen d_type d_name … NUL, padding to 8
    /// ```
    static func parse(_ records: UnsafeRawBufferPointer, of directory: DirectoryWalk.Directory, recursive: Bool,
                      into batch: inout Batch) {
        guard let base = records.baseAddress else { return }
        batch.entries.reserveCapacity(records.count / 32)
        let sameOpened = directory.opened == directory.shown
        // Each entry's path is made once from bytes: the directory's path
        // and a separator, then the name, in one reused buffer (one
        // `FilePath(platformString:)` per entry, not a component and an
        // `appending`, which copies the parent's path twice).
        var prefix = directory.shown.withPlatformString { p in Array(UnsafeBufferPointer(start: p, count: strlen(p))) }
        if prefix.last != 0x2F { prefix.append(0x2F) }
        var buffer = prefix + [CChar](repeating: 0, count: 257)
        var offset = 0
        buffer.withUnsafeMutableBufferPointer { buffer in
            let tail = buffer.baseAddress! + prefix.count
            while offset < records.count {
                let record = base + offset
                let length = Int(record.loadUnaligned(fromByteOffset: 16, as: UInt16.self))
                let rawType = record.load(fromByteOffset: 18, as: UInt8.self)
                let name = (record + 19).assumingMemoryBound(to: CChar.self)
                offset += length
                // "." and "..".
                if name[0] == 0x2E && (name[1] == 0 || (name[1] == 0x2E && name[2] == 0)) { continue }
                let nameLength = strlen(name)
                guard nameLength <= 255 else { continue }
                tail.update(from: name, count: nameLength + 1)
                var type = FileInfo.FileType(directoryEntryType: rawType)
                if type == .unknown { type = typeByStatx(name, in: directory.fd) }
                let path = FilePath(platformString: buffer.baseAddress!)
                batch.entries.append(DirectoryEntry(path: path, type: type))
                if recursive && type == .directory {
                    var opened = path
                    if !sameOpened, let component = FilePath.Component(platformString: name) {
                        opened = directory.opened.appending(component)
                    }
                    batch.subdirectories.append(DirectoryWalk.Directory(shown: path, opened: opened))
                }
            }
        }
    }

    /// The type of `name` in the open directory `fd`, where `getdents64`
    /// said `DT_UNKNOWN` (file systems that do not fill `d_type`).
    static func typeByStatx(_ name: UnsafePointer<CChar>, in fd: CInt) -> FileInfo.FileType {
        var status = cliburing_statx_t()
        do {
            try Syscall.statx(fd, name, flags: AT_SYMLINK_NOFOLLOW, mask: UInt32(STATX_TYPE), into: &status)
        } catch {
            return .unknown
        }
        return FileInfo.FileType(mode: UInt32(status.stx_mode))
    }
}
