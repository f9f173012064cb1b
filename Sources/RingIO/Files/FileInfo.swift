#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase

/// What the file system knows about one file: its type, size, owner,
/// permissions and times (`IO.info(at:followingSymlinks:)`).
///
/// The fields are those of `statx(2)`; the times are ``Timestamp``s, a
/// wall-clock instant as the file system stores it (seconds and
/// nanoseconds since 1970-01-01 00:00 UTC), so that a time read here and
/// written back with `IO.setTimes(at:access:modification:)` is the same to
/// the nanosecond.
public struct FileInfo: Sendable, Hashable {
    /// The type of a file, from its mode (`S_IFMT`) or its directory entry
    /// (`d_type`).
    public enum FileType: Sendable, Hashable {
        /// A regular file (`S_IFREG`, `DT_REG`).
        case regular
        /// A directory (`S_IFDIR`, `DT_DIR`).
        case directory
        /// A symbolic link (`S_IFLNK`, `DT_LNK`).
        case symlink
        /// A named pipe (`S_IFIFO`, `DT_FIFO`).
        case fifo
        /// A Unix-domain socket (`S_IFSOCK`, `DT_SOCK`).
        case socket
        /// A character device (`S_IFCHR`, `DT_CHR`).
        case characterDevice
        /// A block device (`S_IFBLK`, `DT_BLK`).
        case blockDevice
        /// A type the system did not say (`DT_UNKNOWN` from a file system
        /// that does not fill `d_type`, which the directory walk replaces
        /// with the `statx` type; or a mode RingIO does not know).
        case unknown

        /// The type of a mode's `S_IFMT` bits, as swift-system reads them
        /// (`FileType(mode:)`, the library's one reading of them).
        package init(mode: UInt32) {
            self.init(SystemPackage.FileType(mode: CModeT(mode)))
        }

        /// The same type in RingIO's words.
        package init(_ type: SystemPackage.FileType) {
            switch type {
            case .regular: self = .regular
            case .directory: self = .directory
            case .symbolicLink: self = .symlink
            case .fifo: self = .fifo
            case .socket: self = .socket
            case .characterSpecial: self = .characterDevice
            case .blockSpecial: self = .blockDevice
            default: self = .unknown
            }
        }

        /// The type of a directory entry's `d_type`.
        package init(directoryEntryType type: UInt8) {
            switch Int32(type) {
            case Int32(DT_REG): self = .regular
            case Int32(DT_DIR): self = .directory
            case Int32(DT_LNK): self = .symlink
            case Int32(DT_FIFO): self = .fifo
            case Int32(DT_SOCK): self = .socket
            case Int32(DT_CHR): self = .characterDevice
            case Int32(DT_BLK): self = .blockDevice
            default: self = .unknown
            }
        }
    }

    /// An instant on the wall clock as a file system stores it: seconds and
    /// nanoseconds since the Unix epoch (1970-01-01 00:00 UTC).
    ///
    /// It is not a `ContinuousClock.Instant` (which has no epoch) and not
    /// Foundation's `Date` (a `Double` of seconds, which loses the
    /// nanoseconds of a 2026 time): `statx` gives 64 bits of seconds and 32
    /// of nanoseconds, and `utimensat` takes them back unchanged.
    public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
        /// Whole seconds since the epoch (negative before 1970).
        public var seconds: Int64
        /// Nanoseconds past `seconds`, 0 ..< 1,000,000,000.
        public var nanoseconds: UInt32

        /// The instant `seconds` and `nanoseconds` after the epoch.
        ///
        /// - Parameters:
        ///   - seconds: whole seconds since 1970-01-01 00:00 UTC.
        ///   - nanoseconds: the fraction, 0 ..< 1,000,000,000 (larger values
        ///     carry into `seconds`).
        public init(seconds: Int64, nanoseconds: UInt32 = 0) {
            self.seconds = seconds + Int64(nanoseconds / 1_000_000_000)
            self.nanoseconds = nanoseconds % 1_000_000_000
        }

        /// The time since the epoch as a `Duration`.
        public var sinceEpoch: Duration { .seconds(seconds) + .nanoseconds(Int64(nanoseconds)) }

        /// The current wall-clock time (`clock_gettime(CLOCK_REALTIME)`).
        public static var now: Timestamp {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            return Timestamp(seconds: Int64(now.tv_sec), nanoseconds: UInt32(now.tv_nsec))
        }

        public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
            (lhs.seconds, lhs.nanoseconds) < (rhs.seconds, rhs.nanoseconds)
        }

        /// "1764230400.123456789": seconds and nanoseconds since the epoch.
        public var description: String {
            let fraction = String(nanoseconds)
            return "\(seconds)." + String(repeating: "0", count: 9 - fraction.count) + fraction
        }

        init(_ time: statx_timestamp) {
            self.init(seconds: time.tv_sec, nanoseconds: time.tv_nsec)
        }

        /// The C `timespec` of this instant.
        var cTimespec: timespec { timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds)) }
    }

    /// The file's type.
    public var type: FileType
    /// Its size in bytes (for a symlink: the length of its target).
    public var size: Int64
    /// Its permission bits, with set-user-ID, set-group-ID and sticky.
    public var permissions: FilePermissions
    /// The user that owns it.
    public var ownerID: UInt32
    /// The group that owns it.
    public var groupID: UInt32
    /// How many hard links name it.
    public var linkCount: Int
    /// Its inode number on `device`.
    public var inode: UInt64
    /// The device that holds it, encoded as `stat`'s `st_dev` is
    /// (glibc's `makedev(major, minor)`), so it compares equal to it.
    public var device: UInt64
    /// The space it takes on the device, in bytes (512-byte blocks × 512).
    public var allocatedSize: Int64
    /// The last read of its bytes.
    public var accessTime: Timestamp
    /// The last change of its bytes.
    public var modificationTime: Timestamp
    /// The last change of its bytes or its metadata (owner, mode, links).
    public var statusChangeTime: Timestamp
    /// Its creation, where the file system records it (`nil` elsewhere).
    public var creationTime: Timestamp?

    /// The fields `IO.info` asks `statx` for: the basic stats and the
    /// creation time.
    static let mask = UInt32(STATX_BASIC_STATS) | UInt32(STATX_BTIME)

    /// glibc's `makedev` (a macro Swift cannot call): 12 bits of major and
    /// 8 of minor low, the rest of each above.
    static func makeDevice(major: UInt32, minor: UInt32) -> UInt64 {
        let major = UInt64(major), minor = UInt64(minor)
        return (major & 0xFFFF_F000) << 32 | (major & 0xFFF) << 8 | (minor & 0xFFFF_FF00) << 12 | (minor & 0xFF)
    }

    /// The info in a filled `statx` buffer.
    package init(_ s: cliburing_statx_t) {
        type = FileType(mode: UInt32(s.stx_mode))
        size = Int64(bitPattern: s.stx_size)
        permissions = FilePermissions(rawValue: CModeT(s.stx_mode) & 0o7777)
        ownerID = s.stx_uid
        groupID = s.stx_gid
        linkCount = Int(s.stx_nlink)
        inode = s.stx_ino
        device = FileInfo.makeDevice(major: s.stx_dev_major, minor: s.stx_dev_minor)
        allocatedSize = Int64(bitPattern: s.stx_blocks &* 512)
        accessTime = Timestamp(s.stx_atime)
        modificationTime = Timestamp(s.stx_mtime)
        statusChangeTime = Timestamp(s.stx_ctime)
        creationTime = s.stx_mask & UInt32(STATX_BTIME) != 0 ? Timestamp(s.stx_btime) : nil
    }
}

/// One entry of a directory listing (`IO.directoryEntries(at:recursive:)`).
public struct DirectoryEntry: Sendable, Hashable {
    /// The entry's path: the listed directory's path as given, then the
    /// names down to the entry. A name is kept as the bytes the file system
    /// holds (it need not be UTF-8).
    public var path: FilePath
    /// Its type as its directory reports it (a symlink is `.symlink`,
    /// whatever it points at).
    public var type: FileInfo.FileType

    /// An entry at `path` of `type`.
    public init(path: FilePath, type: FileInfo.FileType) {
        self.path = path
        self.type = type
    }

    /// The entry's own name: the last component of `path`.
    public var name: FilePath.Component { path.lastComponent! }
}
