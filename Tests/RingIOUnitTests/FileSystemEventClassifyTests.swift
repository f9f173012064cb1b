#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import RingIOSources

/// `IOFileSystemSource.classify`: one inotify event, the file's size and link
/// count read when the engine reads that event, and what the source saw
/// before → the events to report. The engine reads events some time after
/// they happen, so an event may be read after later changes were made.
@Suite("File-system source: classifying inotify events")
struct FileSystemEventClassifyTests {
    typealias Event = IOFileSystemSource.Event

    @Test("an unlink is a delete even when a write's event was read after it")
    func unlinkAfterWriteReadLate() {
        // chmod, append one byte, unlink: the chmod's IN_ATTRIB read before
        // the unlink; the append's IN_MODIFY read after it (the link count
        // already 0); then the unlink's IN_ATTRIB.
        var tracked = IOFileSystemSource.Tracked(size: 0, links: 1)
        #expect(IOFileSystemSource.classify(UInt32(IN_ATTRIB), status: (0, 1), tracked: &tracked) == .attrib)
        #expect(IOFileSystemSource.classify(UInt32(IN_MODIFY), status: (1, 0), tracked: &tracked) == [.write, .extend])
        let last = IOFileSystemSource.classify(UInt32(IN_ATTRIB), status: (1, 0), tracked: &tracked)
        #expect(last.contains(.delete) && last.contains(.link))
    }

    @Test("a growth is an extend even when a metadata event was read after it")
    func extendAfterAttribReadLate() {
        // chmod then append: the chmod's IN_ATTRIB read after the append.
        var tracked = IOFileSystemSource.Tracked(size: 10, links: 1)
        #expect(IOFileSystemSource.classify(UInt32(IN_ATTRIB), status: (20, 1), tracked: &tracked) == .attrib)
        #expect(IOFileSystemSource.classify(UInt32(IN_MODIFY), status: (20, 1), tracked: &tracked) == [.write, .extend])
    }

    @Test("the plain cases: write in place, link, last unlink, events without a status")
    func plainCases() {
        var tracked = IOFileSystemSource.Tracked(size: 10, links: 1)
        #expect(IOFileSystemSource.classify(UInt32(IN_MODIFY), status: (10, 1), tracked: &tracked) == .write)
        #expect(IOFileSystemSource.classify(UInt32(IN_ATTRIB), status: (10, 2), tracked: &tracked) == .link)
        #expect(IOFileSystemSource.classify(UInt32(IN_ATTRIB), status: (10, 0), tracked: &tracked) == [.link, .delete])
        #expect(IOFileSystemSource.classify(UInt32(IN_MODIFY), status: nil, tracked: &tracked) == .write)
        #expect(IOFileSystemSource.classify(UInt32(IN_MOVE_SELF), status: nil, tracked: &tracked) == .rename)
        #expect(IOFileSystemSource.classify(UInt32(IN_DELETE_SELF), status: nil, tracked: &tracked) == .delete)
        #expect(IOFileSystemSource.classify(UInt32(IN_CREATE), status: nil, tracked: &tracked) == .write)
    }
}
