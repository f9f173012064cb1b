#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import SystemPackage

/// What ringcp needs to know of a file: `lstat` or `stat`, in Swift terms.
struct FileStatus: Sendable {
    enum Kind: Sendable { case regular, directory, symlink, fifo, characterDevice, blockDevice, socket, other }

    let kind: Kind
    let mode: mode_t
    let size: Int64
    let blocks: Int64
    let device: UInt64
    let inode: UInt64
    let uid: uid_t
    let gid: gid_t
    let rawDevice: UInt64
    let accessTime: timespec
    let modificationTime: timespec

    init(_ s: stat) {
        switch s.st_mode & S_IFMT {
        case S_IFREG: kind = .regular
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symlink
        case S_IFIFO: kind = .fifo
        case S_IFCHR: kind = .characterDevice
        case S_IFBLK: kind = .blockDevice
        case S_IFSOCK: kind = .socket
        default: kind = .other
        }
        mode = s.st_mode
        size = Int64(s.st_size)
        blocks = Int64(s.st_blocks)
        device = UInt64(s.st_dev)
        inode = UInt64(s.st_ino)
        uid = s.st_uid
        gid = s.st_gid
        rawDevice = UInt64(s.st_rdev)
        accessTime = s.st_atim
        modificationTime = s.st_mtim
    }

    /// The permission bits, setuid, setgid and sticky included.
    var permissions: mode_t { mode & 0o7777 }

    func isSameFile(as other: FileStatus) -> Bool { device == other.device && inode == other.inode }

    /// Fewer blocks than the size needs: the file may have holes.
    var mayBeSparse: Bool { kind == .regular && blocks * 512 < size }

    /// `stat` (following symlinks) or `lstat`.
    static func of(_ path: String, followingSymlinks: Bool) throws(Errno) -> FileStatus {
        var s = stat()
        let rc = followingSymlinks ? stat(path, &s) : lstat(path, &s)
        if rc != 0 { throw Errno(rawValue: errno) }
        return FileStatus(s)
    }

    /// `nil` when nothing is at `path` (ENOENT, or a dangling path component).
    static func ifPresent(_ path: String, followingSymlinks: Bool) throws(Errno) -> FileStatus? {
        do {
            return try of(path, followingSymlinks: followingSymlinks)
        } catch Errno.noSuchFileOrDirectory {
            return nil
        }
    }
}

/// The system calls ringcp makes outside the copy path: metadata, directory
/// listing, links. They are cheap and need no I/O channel.
enum FS {
    static func check(_ rc: Int32) throws(Errno) {
        if rc != 0 { throw Errno(rawValue: errno) }
    }

    /// The names in a directory (not `.` and `..`), in the order the file system gives.
    static func entries(of path: String) throws(Errno) -> [String] {
        guard let dir = opendir(path) else { throw Errno(rawValue: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(dir) else {
                if errno != 0 { throw Errno(rawValue: errno) }
                return names
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
    }

    static func readLink(_ path: String) throws(Errno) -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(path, &buffer, buffer.count - 1)
        if n < 0 { throw Errno(rawValue: errno) }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Mode, ownership (where permitted) and timestamps of `status`, on `path`.
    /// An ownership change the process may not make is skipped, as `cp -p` does.
    static func preserve(_ status: FileStatus, on path: String, isSymlink: Bool = false) throws(Errno) {
        let flags = isSymlink ? AT_SYMLINK_NOFOLLOW : 0
        if fchownat(AT_FDCWD, path, status.uid, status.gid, flags) != 0 && errno != EPERM {
            throw Errno(rawValue: errno)
        }
        if !isSymlink { try check(chmod(path, status.permissions)) }
        var times = [status.accessTime, status.modificationTime]
        try check(utimensat(AT_FDCWD, path, &times, flags))
    }

    static func temporaryName(beside path: String) -> String {
        IO.temporaryPath(beside: FilePath(path))?.string ?? path + ".ringcp-tmp"
    }
}

/// A path joined with a name, without doubling the slash.
func joined(_ directory: String, _ name: String) -> String {
    directory.hasSuffix("/") ? directory + name : directory + "/" + name
}

/// The last component of `path`, as `basename` gives it (trailing slashes ignored).
func baseName(_ path: String) -> String {
    var trimmed = Substring(path)
    while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
    if let slash = trimmed.lastIndex(of: "/"), trimmed != "/" {
        return String(trimmed[trimmed.index(after: slash)...])
    }
    return String(trimmed)
}
