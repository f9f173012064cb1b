#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) import RingIO
import RingIOBase
@testable import RingIOFiles

/// `IO.info`, `createDirectory`, `removeItem`, `moveItem`, `copyItem`,
/// `withTemporaryDirectory`, symlinks, permissions and times.
@Suite("File and directory operations")
struct FileOperationTests {
    @Test("info: type, size, owner, permissions and times as stat gives them; the ring's statx agrees", arguments: allBackends)
    func info(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("f"), "hello")
        chmod(dir.file("f"), 0o640)
        Tree.symlink("f", dir.file("link"))
        var status = stat()
        #expect(stat(dir.file("f"), &status) == 0)
        let info = try await IO.info(at: FilePath(dir.file("f")))
        #expect(info.type == .regular)
        #expect(info.size == 5)
        #expect(info.permissions == FilePermissions(rawValue: 0o640))
        #expect(info.inode == UInt64(status.st_ino))
        #expect(info.device == UInt64(status.st_dev))
        #expect(info.ownerID == status.st_uid)
        #expect(info.linkCount == 1)
        #expect(info.modificationTime == FileInfo.Timestamp(seconds: Int64(status.st_mtim.tv_sec),
                                                             nanoseconds: UInt32(status.st_mtim.tv_nsec)))
        #expect(try await IO.info(at: FilePath(dir.file("link"))).inode == info.inode)
        let link = try await IO.info(at: FilePath(dir.file("link")), followingSymlinks: false)
        #expect(link.type == .symlink)
        #expect(link.size == 1)
        #expect(try await IO.info(at: FilePath(dir.path)).type == .directory)
        let ring = try await IO.info(at: FilePath(dir.file("f")), engine: engine)
        #expect(ring == info)
        do {
            _ = try await IO.info(at: FilePath(dir.file("missing")))
            Issue.record("no error")
        } catch {
            #expect(error.errno == .noSuchFileOrDirectory)
            #expect(error.path == FilePath(dir.file("missing")))
            #expect(error.operation == .stat)
        }
    }

    @Test("info's inline path (dentries cached, local file system) agrees with statx on a worker; a missing path is left to the worker")
    func inlineInfo() async throws {
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("f"), "12345")
        Tree.symlink("f", dir.file("l"))
        for (path, follow) in [(dir.file("f"), true), (dir.file("l"), false), (dir.file("l"), true), (dir.path, true)] {
            _ = try IO.infoNow(at: FilePath(path), followingSymlinks: follow)  // now cached
            let inline = try #require(IO.cachedInfo(at: FilePath(path), followingSymlinks: follow))
            #expect(inline == (try IO.infoNow(at: FilePath(path), followingSymlinks: follow)))
        }
        #expect(IO.cachedInfo(at: FilePath(dir.file("missing")), followingSymlinks: true) == nil)
        #expect(IO.cachedInfo(at: FilePath(dir.file("l")), followingSymlinks: false)?.type == .symlink)
    }

    @Test("createDirectory: one level, intermediates, an existing directory, a file in the way")
    func createDirectory() async throws {
        let dir = TemporaryDirectory()
        try await IO.createDirectory(at: FilePath(dir.file("one")))
        #expect(try await IO.info(at: FilePath(dir.file("one"))).type == .directory)
        #expect(await thrownErrno { try await IO.createDirectory(at: FilePath(dir.file("one"))) } == .fileExists)
        try await IO.createDirectory(at: FilePath(dir.file("one")), intermediates: true)
        do {
            try await IO.createDirectory(at: FilePath(dir.file("a/b/c")))
            Issue.record("no error")
        } catch {
            #expect(error.errno == .noSuchFileOrDirectory)
            #expect(error.path == FilePath(dir.file("a/b/c")))
        }
        try await IO.createDirectory(at: FilePath(dir.file("a/b/c")), intermediates: true, permissions: .ownerReadWriteExecute)
        #expect(try await IO.info(at: FilePath(dir.file("a/b/c"))).permissions == .ownerReadWriteExecute)
        Tree.touch(dir.file("file"))
        do {
            try await IO.createDirectory(at: FilePath(dir.file("file/x/y")), intermediates: true)
            Issue.record("no error")
        } catch {
            #expect(error.errno == .notDirectory)
        }
        // Many tasks creating the same tree at once all succeed.
        let target = FilePath(dir.file("p/q/r/s"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask { try await IO.createDirectory(at: target, intermediates: true) }
            }
            try await group.waitForAll()
        }
        #expect(Tree.exists(dir.file("p/q/r/s")))
    }

    @Test("removeItem: a file, a symlink (not its target), an empty and a full directory, nothing")
    func removeItem() async throws {
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("file"))
        Tree.symlink("file", dir.file("link"))
        #expect(try await IO.removeItem(at: FilePath(dir.file("link"))) == 1)
        #expect(Tree.exists(dir.file("file")))
        #expect(try await IO.removeItem(at: FilePath(dir.file("file"))) == 1)
        #expect(try await IO.removeItem(at: FilePath(dir.file("file"))) == 0)
        Tree.mkdir(dir.file("empty"))
        #expect(try await IO.removeItem(at: FilePath(dir.file("empty"))) == 1)
        Tree.mkdir(dir.file("tree"))
        Tree.make(dir.file("tree"), directories: 30, files: 40)
        Tree.symlink("/", dir.file("tree/d0/root"))
        do {
            try await IO.removeItem(at: FilePath(dir.file("tree")))
            Issue.record("removed a full directory without recursively")
        } catch {
            #expect(error.errno == .directoryNotEmpty)
        }
        #expect(try await IO.removeItem(at: FilePath(dir.file("tree")), recursively: true) == 1 + 30 + 30 * 40 + 1)
        #expect(!Tree.exists(dir.file("tree")))
    }

    @Test("removeItem of a tree 1,200 levels deep")
    func removeDeepTree() async throws {
        let dir = TemporaryDirectory()
        var path = dir.file("deep")
        for _ in 0..<1200 {
            Tree.mkdir(path)
            Tree.touch(path + "/f")
            path += "/a"
        }
        #expect(try await IO.removeItem(at: FilePath(dir.file("deep")), recursively: true) == 2400)
        #expect(!Tree.exists(dir.file("deep")))
    }

    @Test("removeItem racing creations in the tree: gone, or ENOTEMPTY naming a directory in it; gone once they stop")
    func removalRacingCreation() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("tree"))
        Tree.make(dir.file("tree"), directories: 10, files: 200)
        let stop = Locked(false)
        let done = Latch()
        let root = dir.file("tree")
        _ = spawnThread(name: "creator") {
            var i = 0
            while !stop.withLock({ $0 }) {
                // mkdir fails once the removal took the directory: fine.
                _ = mkdir(root + "/d\(i % 10)", 0o755)
                let fd = open(root + "/d\(i % 10)/late\(i)", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
                if fd >= 0 { close(fd) }
                i += 1
            }
            done.signal()
        }
        do {
            let removed = try await IO.removeItem(at: FilePath(dir.file("tree")), recursively: true)
            #expect(removed >= 1 + 10 + 2000 || !Tree.exists(dir.file("tree")))
        } catch {
            #expect(error.errno == .directoryNotEmpty || error.errno == .noSuchFileOrDirectory)
            #expect(error.path?.starts(with: FilePath(dir.file("tree"))) == true)
        }
        stop.withLock { $0 = true }
        #expect(done.wait())
        try await IO.removeItem(at: FilePath(dir.file("tree")), recursively: true)
        #expect(!Tree.exists(dir.file("tree")))
    }

    @Test("removeItem stops at an injected EACCES and names the entry; the rest can be removed after")
    func removalPermissionDenied() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("tree"))
        Tree.make(dir.file("tree"), directories: 3, files: 5)
        let denied = Syscall.Mock.inject(.unlinkat, errno: .permissionDenied, times: 1,
                                         scope: .files(under: FilePath(dir.file("tree/d1/f3"))))
        defer { denied.remove() }
        do {
            try await IO.removeItem(at: FilePath(dir.file("tree")), recursively: true)
            Issue.record("no error")
        } catch {
            #expect(error.errno == .permissionDenied)
            #expect(error.path == FilePath(dir.file("tree/d1/f3")))
            #expect("\(error)".contains("Unable to remove"))
        }
        #expect(Tree.exists(dir.file("tree/d1/f3")))
        try await IO.removeItem(at: FilePath(dir.file("tree")), recursively: true)
        #expect(!Tree.exists(dir.file("tree")))
    }

    @Test("moveItem: a rename; EEXIST without replacing; across devices (EXDEV injected) a copy and a removal")
    func moveItem() async throws {
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("a"), "a")
        Tree.touch(dir.file("b"), "b")
        try await IO.moveItem(from: FilePath(dir.file("a")), to: FilePath(dir.file("c")))
        #expect(!Tree.exists(dir.file("a")) && Tree.exists(dir.file("c")))
        do {
            try await IO.moveItem(from: FilePath(dir.file("c")), to: FilePath(dir.file("b")))
            Issue.record("replaced")
        } catch {
            #expect(error.errno == .fileExists)
            #expect(error.path == FilePath(dir.file("b")))
        }
        #expect(try await IO.readFile(at: FilePath(dir.file("b"))) == DataChunk("b".utf8))
        Tree.mkdir(dir.file("tree"))
        Tree.make(dir.file("tree"), directories: 3, files: 4)
        Tree.symlink("d0/f0", dir.file("tree/link"))
        let exdev = Syscall.Mock.inject(.renameat2, errno: .improperLink, times: 1,
                                        scope: .files(under: FilePath(dir.file("tree"))))
        defer { exdev.remove() }
        try await IO.moveItem(from: FilePath(dir.file("tree")), to: FilePath(dir.file("moved")))
        #expect(exdev.fired == 1)
        #expect(!Tree.exists(dir.file("tree")))
        let moved = try await listing(dir.file("moved"), recursive: true)
        #expect(moved.count == 3 + 12 + 1)
        #expect(moved[dir.file("moved/link")] == .symlink)
        #expect(try await IO.destinationOfSymbolicLink(at: FilePath(dir.file("moved/link"))) == "d0/f0")
    }

    @Test("copyItem: a tree with files, symlinks and empty directories; permissions kept; exclusive refuses")
    func copyTree() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("src"))
        Tree.make(dir.file("src"), directories: 6, files: 25)
        for d in 0..<6 { Tree.touch(dir.file("src/d\(d)/data"), String(repeating: "x\(d)", count: 1000)) }
        Tree.mkdir(dir.file("src/empty"))
        chmod(dir.file("src/empty"), 0o700)
        Tree.symlink("../d1/data", dir.file("src/d0/link"))
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
        let source = try await listing(dir.file("src"), recursive: true)
        let copy = try await listing(dir.file("dst"), recursive: true)
        #expect(Set(copy.keys.map { String($0.dropFirst(dir.file("dst").count)) })
                == Set(source.keys.map { String($0.dropFirst(dir.file("src").count)) }))
        #expect(copy[dir.file("dst/d0/link")] == .symlink)
        #expect(try await IO.readFile(at: FilePath(dir.file("dst/d3/data"))) == DataChunk(String(repeating: "x3", count: 1000).utf8))
        #expect(try await IO.info(at: FilePath(dir.file("dst/empty"))).permissions == .ownerReadWriteExecute)
        #expect(await thrownErrno {
                try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")),
                                      options: .init(exclusive: true))
            } == .fileExists)
    }

    @Test("withTemporaryDirectory: a new empty directory, removed after the body returns or throws")
    func temporaryDirectory() async throws {
        struct Expected: Error {}
        let kept = try await IO.withTemporaryDirectory { directory in
            let entries = try await listing(directory.string, recursive: false)
            #expect(entries.isEmpty)
            Tree.mkdir(directory.string + "/sub")
            Tree.touch(directory.string + "/sub/file")
            return directory
        }
        #expect(!Tree.exists(kept.string))
        let thrownIn = Locked<FilePath?>(nil)
        await #expect(throws: Expected.self) {
            try await IO.withTemporaryDirectory { directory in
                thrownIn.withLock { $0 = directory }
                Tree.touch(directory.string + "/file")
                throw Expected()
            }
        }
        let path = try #require(thrownIn.withLock { $0 })
        #expect(!Tree.exists(path.string))
    }

    @Test("symlinks, permissions and times: set and read back to the nanosecond")
    func linksPermissionsTimes() async throws {
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("f"))
        try await IO.createSymbolicLink(at: FilePath(dir.file("l")), withDestination: "f")
        #expect(try await IO.destinationOfSymbolicLink(at: FilePath(dir.file("l"))) == "f")
        #expect(await thrownErrno { _ = try await IO.destinationOfSymbolicLink(at: FilePath(dir.file("f"))) } == .invalidArgument)
        try await IO.setPermissions([.ownerRead, .groupRead], at: FilePath(dir.file("f")))
        #expect(try await IO.info(at: FilePath(dir.file("f"))).permissions == [.ownerRead, .groupRead])
        let then = FileInfo.Timestamp(seconds: 1_600_000_000, nanoseconds: 123_456_789)
        try await IO.setTimes(at: FilePath(dir.file("f")), modification: then)
        let info = try await IO.info(at: FilePath(dir.file("f")))
        #expect(info.modificationTime == then)
        #expect(info.accessTime != then)
        #expect(then.description == "1600000000.123456789")
    }
}
