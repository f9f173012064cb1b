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
    /// Its names (hard links).
    let links: UInt64
    let accessTime: timespec
    let modificationTime: timespec

    init(_ s: stat) {
        // The type from swift-system's `Stat.type` (the mapping of st_mode
        // the library uses too), in ringcp's words.
        switch Stat(rawValue: s).type {
        case .regular: kind = .regular
        case .directory: kind = .directory
        case .symbolicLink: kind = .symlink
        case .fifo: kind = .fifo
        case .characterSpecial: kind = .characterDevice
        case .blockSpecial: kind = .blockDevice
        case .socket: kind = .socket
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
        links = UInt64(s.st_nlink)
        accessTime = s.st_atim
        modificationTime = s.st_mtim
    }

    /// The permission bits, setuid, setgid and sticky included.
    var permissions: mode_t { mode & 0o7777 }

    func isSameFile(as other: FileStatus) -> Bool { device == other.device && inode == other.inode }

    var identity: FileIdentity { FileIdentity(device: device, inode: inode) }

    /// Fewer blocks than the size needs: the file may have holes.
    var mayBeSparse: Bool { kind == .regular && blocks * 512 < size }

    /// `stat` (following symlinks) or `lstat`.
    static func of(_ path: FilePath, followingSymlinks: Bool) throws(Errno) -> FileStatus {
        var s = stat()
        let rc = path.withPlatformString { followingSymlinks ? stat($0, &s) : lstat($0, &s) }
        if rc != 0 { throw Errno(rawValue: errno) }
        return FileStatus(s)
    }

    /// `nil` when nothing is at `path` (ENOENT, or a dangling path component).
    static func ifPresent(_ path: FilePath, followingSymlinks: Bool) throws(Errno) -> FileStatus? {
        do {
            return try of(path, followingSymlinks: followingSymlinks)
        } catch Errno.noSuchFileOrDirectory {
            return nil
        }
    }
}

/// A file's device and inode: which file it is, whatever its names.
struct FileIdentity: Hashable, Sendable {
    let device: UInt64
    let inode: UInt64
}

/// The system calls ringcp makes outside the copy path: metadata, directory
/// listing, links. They are cheap and need no I/O channel. Paths are
/// `FilePath`s, bytes as the kernel has them: a name that is not valid
/// UTF-8 is copied as it is (only messages show it repaired).
enum FS {
    static func check(_ rc: Int32) throws(Errno) {
        if rc != 0 { throw Errno(rawValue: errno) }
    }

    /// The names in a directory (not `.` and `..`), in the order the file system gives.
    static func entries(of path: FilePath) throws(Errno) -> [FilePath.Component] {
        guard let dir = path.withPlatformString({ opendir($0) }) else { throw Errno(rawValue: errno) }
        defer { closedir(dir) }
        var names: [FilePath.Component] = []
        while true {
            errno = 0
            guard let entry = readdir(dir) else {
                if errno != 0 { throw Errno(rawValue: errno) }
                return names
            }
            let component = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                FilePath.Component(platformString: raw.baseAddress!.assumingMemoryBound(to: CInterop.PlatformChar.self))
            }
            if let component, component.kind == .regular { names.append(component) }
        }
    }

    static func readLink(_ path: FilePath) throws(Errno) -> FilePath {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = path.withPlatformString { readlink($0, &buffer, buffer.count - 1) }
        if n < 0 { throw Errno(rawValue: errno) }
        buffer[n] = 0
        return buffer.withUnsafeBufferPointer { FilePath(platformString: $0.baseAddress!) }
    }

    static func realPath(_ path: FilePath) -> FilePath? {
        guard let resolved = path.withPlatformString({ realpath($0, nil) }) else { return nil }
        defer { free(resolved) }
        return FilePath(platformString: resolved)
    }

    /// The attributes `what` names, from `status` (and, for ACLs and
    /// extended attributes, the file at `source`), on `path`.
    /// As `cp -p`: an ownership change the process may not make is skipped,
    /// but the group is still kept where the process may give it (a group
    /// the user belongs to), and then the setuid, setgid and sticky bits are
    /// not: they would now apply to another owner or group. ACLs (the
    /// `system.posix_acl_*` attributes) come with the mode; the other
    /// extended attributes with `.xattr` (where the file system takes them).
    static func preserve(_ status: FileStatus, from source: FilePath? = nil, on path: FilePath, _ what: Preserve,
                         isSymlink: Bool = false) throws(Errno) {
        let flags = isSymlink ? AT_SYMLINK_NOFOLLOW : 0
        let failure = path.withPlatformString { p -> Errno? in
            var mode = status.permissions
            if what.contains(.ownership) && fchownat(AT_FDCWD, p, status.uid, status.gid, flags) != 0 {
                guard errno == EPERM || errno == EINVAL else { return Errno(rawValue: errno) }
                _ = fchownat(AT_FDCWD, p, uid_t.max, status.gid, flags)  // -1: the owner as it is
                mode &= ~(S_ISUID | S_ISGID | S_ISVTX)
            }
            if what.contains(.mode) && !isSymlink && Glibc.chmod(p, mode) != 0 { return Errno(rawValue: errno) }
            if let source, what.contains(.mode) || what.contains(.xattr), !isSymlink {
                if let error = copyAttributes(from: source, to: p, acls: what.contains(.mode),
                                              others: what.contains(.xattr)) { return error }
            }
            guard what.contains(.timestamps) else { return nil }
            var times = [status.accessTime, status.modificationTime]
            return utimensat(AT_FDCWD, p, &times, flags) != 0 ? Errno(rawValue: errno) : nil
        }
        if let failure { throw failure }
    }

    // <sys/xattr.h> is not in the Glibc module: the C library's functions, looked up once.
    private typealias ListXattr = @convention(c) (UnsafePointer<CChar>?, UnsafeMutablePointer<CChar>?, Int) -> Int
    private typealias GetXattr = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int
    private typealias SetXattr = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeRawPointer?, Int, Int32) -> Int32
    private static func symbol<T>(_ name: String, as type: T.Type) -> T? {
        guard let pointer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }  // RTLD_DEFAULT
        return unsafeBitCast(pointer, to: type)
    }
    private static let listxattr = symbol("listxattr", as: ListXattr.self)
    private static let getxattr = symbol("getxattr", as: GetXattr.self)
    private static let setxattr = symbol("setxattr", as: SetXattr.self)

    /// The extended attributes of `source` set on `target`: the ACLs
    /// (`system.posix_acl_access`, `_default`), the others, or both. A file
    /// system that has none or takes none is no error.
    private static func copyAttributes(from source: FilePath, to target: UnsafePointer<CChar>, acls: Bool,
                                       others: Bool) -> Errno? {
        guard let listxattr, let getxattr, let setxattr else { return nil }
        return source.withPlatformString { s -> Errno? in
            let size = listxattr(s, nil, 0)
            if size <= 0 { return nil }
            var names = [CChar](repeating: 0, count: size)
            let listed = listxattr(s, &names, size)
            if listed <= 0 { return nil }
            var value = [UInt8](repeating: 0, count: 64 << 10)
            for name in names[0..<listed].split(separator: 0) {
                let text = String(decoding: name.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                let isACL = text.hasPrefix("system.posix_acl_")
                guard isACL ? acls : others, text != "security.selinux" else { continue }
                let terminated = Array(name) + [0]
                let n = getxattr(s, terminated, &value, value.count)
                if n < 0 { continue }
                if setxattr(target, terminated, value, n, 0) != 0 && errno != ENOTSUP && errno != EPERM {
                    return Errno(rawValue: errno)
                }
            }
            return nil
        }
    }

    static func temporaryName(beside path: FilePath) -> FilePath {
        IO.temporaryPath(beside: path) ?? FilePath(path.string + ".ringcp-tmp")
    }

    // The plain system calls, on FilePaths.
    static func mkdir(_ path: FilePath, _ mode: mode_t) -> Int32 { path.withPlatformString { Glibc.mkdir($0, mode) } }
    static func unlink(_ path: FilePath) -> Int32 { path.withPlatformString { Glibc.unlink($0) } }
    static func chmod(_ path: FilePath, _ mode: mode_t) -> Int32 { path.withPlatformString { Glibc.chmod($0, mode) } }
    static func chown(_ path: FilePath, _ uid: uid_t, _ gid: gid_t) -> Int32 {
        path.withPlatformString { Glibc.chown($0, uid, gid) }
    }
    static func access(_ path: FilePath, _ mode: Int32) -> Int32 { path.withPlatformString { Glibc.access($0, mode) } }
    static func mkfifo(_ path: FilePath, _ mode: mode_t) -> Int32 { path.withPlatformString { Glibc.mkfifo($0, mode) } }
    static func mknod(_ path: FilePath, _ mode: mode_t, _ device: dev_t) -> Int32 {
        path.withPlatformString { Glibc.mknod($0, mode, device) }
    }
    static func open(_ path: FilePath, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
        path.withPlatformString { Glibc.open($0, flags, mode) }
    }
    static func symlink(_ target: FilePath, _ path: FilePath) -> Int32 {
        target.withPlatformString { t in path.withPlatformString { Glibc.symlink(t, $0) } }
    }
    static func link(_ existing: FilePath, _ new: FilePath) -> Int32 {
        existing.withPlatformString { e in new.withPlatformString { Glibc.link(e, $0) } }
    }
    static func rename(_ old: FilePath, _ new: FilePath) -> Int32 {
        old.withPlatformString { o in new.withPlatformString { Glibc.rename(o, $0) } }
    }
}

/// `directory` and `name` joined.
func joined(_ directory: FilePath, _ name: FilePath.Component) -> FilePath {
    directory.appending(name)
}

/// `directory` joined with the last component of `path` (`dir` for "a/dir/").
func joined(_ directory: FilePath, lastComponentOf path: FilePath) -> FilePath {
    guard let name = path.lastComponent else { return directory }
    return directory.appending(name)
}

/// The last component of `path`, as `basename` gives it (trailing slashes ignored).
func baseName(_ path: String) -> String {
    FilePath(path).lastComponent?.string ?? (path.hasPrefix("/") ? "/" : path)
}
