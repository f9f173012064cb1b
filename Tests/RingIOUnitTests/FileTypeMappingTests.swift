#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOFiles

/// `FileInfo.FileType` from a mode goes through swift-system's `FileType`
/// (the library's one reading of `S_IFMT`), and agrees with `d_type`.
@Suite("FileInfo.FileType")
struct FileTypeMappingTests {
    static let cases: [(mode: mode_t, entryType: Int32, type: FileInfo.FileType)] = [
        (S_IFREG, Int32(DT_REG), .regular), (S_IFDIR, Int32(DT_DIR), .directory),
        (S_IFLNK, Int32(DT_LNK), .symlink), (S_IFIFO, Int32(DT_FIFO), .fifo),
        (S_IFSOCK, Int32(DT_SOCK), .socket), (S_IFCHR, Int32(DT_CHR), .characterDevice),
        (S_IFBLK, Int32(DT_BLK), .blockDevice),
    ]

    @Test("every S_IF* type, with permission bits around it; a type bit pattern no system uses is .unknown")
    func modes() {
        for (mode, entryType, type) in Self.cases {
            #expect(FileInfo.FileType(mode: UInt32(mode)) == type)
            #expect(FileInfo.FileType(mode: UInt32(mode | 0o4755)) == type)
            #expect(FileInfo.FileType(SystemPackage.FileType(rawValue: mode)) == type)
            #expect(FileInfo.FileType(directoryEntryType: UInt8(entryType)) == type)
        }
        #expect(FileInfo.FileType(mode: 0o030644) == .unknown)
        #expect(FileInfo.FileType(mode: 0o644) == .unknown)
        #expect(FileInfo.FileType(directoryEntryType: UInt8(DT_UNKNOWN)) == .unknown)
    }
}
