import RingIO
import SystemPackage
import Testing
import RingIOTestSupport

@Suite("IOError")
struct IOErrorTests {
    @Test func describesOperationPathAndErrno() {
        let error = IOError(.openForReading, path: "/x/y", errno: .noSuchFileOrDirectory)
        #expect(error.description == "Unable to open '/x/y' for reading: No such file or directory (ENOENT)")
        let write = IOError(.write, path: "/a", side: .destination, errno: .noSpace)
        #expect(write.description == "Unable to write '/a': No space left on device (ENOSPC)")
    }

    @Test func matchesByErrno() {
        func fail() throws(IOError) { throw IOError(.stat, path: "/nope", errno: .noSuchFileOrDirectory) }
        var matched = false
        do { try fail() } catch Errno.noSuchFileOrDirectory { matched = true } catch {}
        #expect(matched)
    }
}
