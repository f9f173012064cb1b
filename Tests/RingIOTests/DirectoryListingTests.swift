#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) import RingIO
import RingIOBase
import RingIOFiles

/// `IO.directoryEntries(at:recursive:)`: batches, recursion, and the trees
/// that go wrong (changing, looping, deep, non-UTF-8, unreadable).
///
/// The walk makes its system calls on `IOQueue.global`'s workers, with no
/// engine; the suite runs under both `RINGIO_BACKEND` settings all the same.
@Suite("Directory listing")
struct DirectoryListingTests {
    @Test("one directory of 2,500 files: every name once, in several batches, no . or ..")
    func flatDirectory() async throws {
        let dir = TemporaryDirectory()
        for i in 0..<2500 { Tree.touch(dir.file("file-with-a-longish-name-\(i)")) }
        Tree.mkdir(dir.file("sub"))
        Tree.touch(dir.file("sub/inner"))
        let found = try await listing(dir.path, recursive: false)
        #expect(found.count == 2501)
        #expect(found[dir.file("sub")] == .directory)
        #expect(found[dir.file("file-with-a-longish-name-2499")] == .regular)
        #expect(found[dir.file("sub/inner")] == nil)
        var batches = 0
        for try await batch in IO.directoryEntries(at: FilePath(dir.path)).batched() {
            #expect(!batch.isEmpty)
            batches += 1
        }
        #expect(batches >= 2, "2,500 entries of ~40-byte records do not fit one 32 KiB batch")
    }

    @Test("recursive: every entry of a tree, symlinks as symlinks, not followed")
    func recursiveTree() async throws {
        let dir = TemporaryDirectory()
        var expected = Tree.make(dir.path, directories: 5, files: 20)
        Tree.mkdir(dir.file("d0/deeper"))
        Tree.touch(dir.file("d0/deeper/leaf"))
        Tree.symlink(dir.path, dir.file("d1/up"))  // a loop if followed
        Tree.symlink("nowhere", dir.file("d2/dangling"))
        expected.formUnion([dir.file("d0/deeper"), dir.file("d0/deeper/leaf"), dir.file("d1/up"), dir.file("d2/dangling")])
        let found = try await listing(dir.path, recursive: true)
        #expect(Set(found.keys) == expected)
        #expect(found[dir.file("d1/up")] == .symlink)
        #expect(found[dir.file("d0/deeper")] == .directory)
    }

    @Test("a symlink loop (a → b, b → a, self → .) ends the walk normally")
    func symlinkLoop() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("a"))
        Tree.symlink("../b", dir.file("a/b"))
        Tree.symlink("a", dir.file("b"))
        Tree.symlink(".", dir.file("a/self"))
        let found = try await listing(dir.path, recursive: true)
        #expect(found == [dir.file("a"): .directory, dir.file("a/b"): .symlink, dir.file("b"): .symlink,
                          dir.file("a/self"): .symlink])
    }

    @Test("a relative path: entries under the path as given, opened from the current directory of the call")
    func relativePath() async throws {
        let dir = TemporaryDirectory()
        Tree.make(dir.path, directories: 2, files: 2)
        // The test process's working directory is shared: list through a
        // path relative to it that reaches the temporary directory.
        var cwd = [CChar](repeating: 0, count: 4096)
        _ = getcwd(&cwd, cwd.count)
        let depth = String(decoding: cwd.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            .split(separator: "/").count
        let relative = String(repeating: "../", count: depth) + String(dir.path.dropFirst())
        let found = try await listing(relative, recursive: true)
        #expect(found.count == 6)
        #expect(found[relative + "/d1/f1"] == .regular)
    }

    @Test("names that are not UTF-8 keep their bytes, and can be opened by the listed path")
    func nonUTF8Names() async throws {
        let dir = TemporaryDirectory()
        let raw: [UInt8] = [0x66, 0xFF, 0xFE, 0x80, 0x67]  // "f", invalid bytes, "g"
        Tree.touch(in: dir.path, rawName: raw)
        var entries: [DirectoryEntry] = []
        for try await entry in IO.directoryEntries(at: FilePath(dir.path)) { entries.append(entry) }
        #expect(entries.count == 1)
        let name = try #require(entries.first?.name)
        let bytes = name.withPlatformString { p in Array(UnsafeBufferPointer(start: p, count: strlen(p))).map { UInt8(bitPattern: $0) } }
        #expect(bytes == raw)
        let info = try await IO.info(at: entries[0].path)
        #expect(info.type == .regular)
        #expect(try await IO.removeItem(at: entries[0].path) == 1)
    }

    @Test("a tree 1,200 levels deep: every level listed with at most 32 directories open")
    func deepTree() async throws {
        let dir = TemporaryDirectory()
        var path = dir.path
        for _ in 0..<1200 {
            path += "/a"
            Tree.mkdir(path)
        }
        var iterator = IO.directoryEntries(at: FilePath(dir.path), recursive: true).makeAsyncIterator()
        var count = 0
        while let entry = try await iterator.next() {
            #expect(entry.type == .directory)
            count += 1
        }
        #expect(count == 1200)
        #expect(iterator.walk.peakDescriptors <= DirectoryWalk.Limits.recursive.descriptors)
        #expect(try await IO.removeItem(at: FilePath(dir.path + "/a"), recursively: true) == 1200)
    }

    @Test("paths longer than PATH_MAX (20 levels of 250-byte names): listing, info and removal fail with ENAMETOOLONG naming the entry, after the entries before it")
    func longerThanPathMax() async throws {
        let dir = TemporaryDirectory()
        let name = String(repeating: "n", count: 250)
        // Made level by level relative to the parent's fd: mkdir(2) of the
        // whole path would fail past 4,096 bytes.
        var fd = open(dir.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        #expect(fd >= 0)
        for _ in 0..<20 {
            #expect(mkdirat(fd, name, 0o755) == 0)
            let child = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(fd)
            fd = child
            #expect(fd >= 0)
        }
        let leaf = openat(fd, "leaf", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        #expect(leaf >= 0)
        close(leaf)
        close(fd)
        // Made from one string: appending 20 long names one by one re-checks
        // the growing path after every byte in a debug swift-system (seconds
        // under ThreadSanitizer).
        let deepest = FilePath(dir.path + String(repeating: "/" + name, count: 20) + "/leaf")
        #expect(deepest.string.utf8.count > Int(PATH_MAX))

        // The walk opens each directory by its path (it holds no chain of
        // fds): the first one whose path passes PATH_MAX fails, named.
        var listed = 0
        do {
            for try await entry in IO.directoryEntries(at: FilePath(dir.path), recursive: true) {
                #expect(entry.path.string.utf8.count < Int(PATH_MAX) + 256)
                listed += 1
            }
            Issue.record("listing a tree deeper than PATH_MAX did not fail")
        } catch {
            #expect(error.errno == .fileNameTooLong)
            #expect(error.operation == .list)
            let length = error.path?.string.utf8.count ?? 0
            #expect(length >= Int(PATH_MAX) && length < Int(PATH_MAX) + 256, "names the first directory past PATH_MAX")
        }
        #expect(listed > 10)
        do {
            _ = try await IO.info(at: deepest)
            Issue.record("info of a path of \(deepest.string.utf8.count) bytes did not fail")
        } catch {
            #expect(error.errno == .fileNameTooLong)
            #expect(error.path == deepest)
        }
        var top = FilePath(dir.path)
        top.append(name)
        do {
            _ = try await IO.removeItem(at: top, recursively: true)
            Issue.record("removing a tree deeper than PATH_MAX did not fail")
        } catch {
            #expect(error.errno == .fileNameTooLong)
            let length = error.path?.string.utf8.count ?? 0
            #expect(length >= Int(PATH_MAX) && length < Int(PATH_MAX) + 256, "names the first directory past PATH_MAX")
        }
        // The test's own clean-up, from the bottom up by fds.
        Self.removeNested(dir.path, name: name, depth: 20)
    }

    /// Removes `depth` nested directories `name` (and a file "leaf" in the
    /// deepest) under `root` through fds, whatever their paths' length.
    static func removeNested(_ root: String, name: String, depth: Int) {
        var fds = [open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)]
        for _ in 0..<depth {
            let child = openat(fds.last!, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard child >= 0 else { break }
            fds.append(child)
        }
        unlinkat(fds.last!, "leaf", 0)
        while fds.count > 1 {
            close(fds.removeLast())
            unlinkat(fds.last!, name, AT_REMOVEDIR)
        }
        close(fds[0])
    }

    @Test("deeper than the fd limit: a child process with RLIMIT_NOFILE 40 walks 300 levels")
    func deeperThanTheFDLimit() async throws {
        let dir = TemporaryDirectory()
        var path = dir.path
        for _ in 0..<300 {
            path += "/d"
            Tree.mkdir(path)
        }
        await #expect(processExitsWith: .success) { [root = dir.path as String] in
            var limit = rlimit(rlim_cur: 40, rlim_max: 40)
            guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { exit(2) }
            var count = 0
            for try await entry in IO.directoryEntries(at: FilePath(root), recursive: true) where entry.type == .directory {
                count += 1
            }
            exit(count == 300 ? 0 : 1)
        }
    }

    @Test("a tree that changes while it is walked: no error, every entry that stays is listed")
    func changingTree() async throws {
        let dir = TemporaryDirectory()
        let stable = Tree.make(dir.path, directories: 20, files: 50)
        let stop = Locked(false)
        let done = Latch()
        let root = dir.path
        _ = spawnThread(name: "churn") {
            var i = 0
            while !stop.withLock({ $0 }) {
                let sub = root + "/d\(i % 20)/churn\(i)"
                Tree.mkdir(sub)
                Tree.touch(sub + "/x")
                _ = unlink(sub + "/x")
                _ = rmdir(sub)
                Tree.touch(root + "/d\(i % 20)/new\(i)")
                _ = unlink(root + "/d\(i % 20)/new\(i)")
                i += 1
            }
            done.signal()
        }
        defer {
            stop.withLock { $0 = true }
            _ = done.wait(timeout: .seconds(10))
        }
        for _ in 0..<5 {
            let found = try await listing(dir.path, recursive: true)
            #expect(stable.isSubset(of: Set(found.keys)))
        }
    }

    @Test("EACCES in the middle of a tree (injected: root ignores permissions) names the directory")
    func permissionDeniedInjected() async throws {
        let dir = TemporaryDirectory()
        Tree.make(dir.path, directories: 4, files: 10)
        Tree.mkdir(dir.file("d2/locked"))
        Tree.touch(dir.file("d2/locked/secret"))
        let denied = Syscall.Mock.inject(.openat, errno: .permissionDenied, times: 1,
                                         scope: .files(under: FilePath(dir.file("d2/locked"))))
        defer { denied.remove() }
        await #expect {
            _ = try await listing(dir.path, recursive: true)
        } throws: { error in
            guard let error = error as? IOError else { return false }
            return error.errno == .permissionDenied && error.path == FilePath(dir.file("d2/locked"))
                && error.operation == .list && "\(error)".contains("Unable to list")
        }
        #expect(denied.fired == 1)
    }

    @Test("EACCES from a real mode-000 directory (not as root: root bypasses permissions)")
    func permissionDeniedReal() async throws {
        if geteuid() == 0 {
            try Test.cancel("running as root: a mode-000 directory is still readable; the injected test covers EACCES")
        }
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("locked"))
        chmod(dir.file("locked"), 0)
        defer { chmod(dir.file("locked"), 0o755) }
        #expect(await thrownErrno { _ = try await listing(dir.path, recursive: true) } == .permissionDenied)
    }

    @Test("errors name the listed path: ENOENT, ENOTDIR")
    func rootErrors() async throws {
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("file"))
        #expect(await thrownErrno { _ = try await listing(dir.file("missing"), recursive: false) } == .noSuchFileOrDirectory)
        do {
            _ = try await listing(dir.file("file"), recursive: true)
            Issue.record("listed a regular file")
        } catch {
            #expect(error.errno == .notDirectory)
            #expect(error.path == FilePath(dir.file("file")))
        }
    }

    @Test("leaving the loop early closes every directory the walk opened")
    func earlyExitCloses() async throws {
        let dir = TemporaryDirectory()
        Tree.make(dir.path, directories: 40, files: 10)
        for _ in 0..<20 {
            for try await entry in IO.directoryEntries(at: FilePath(dir.path), recursive: true) where entry.type == .regular {
                break
            }
        }
        // Jobs still running close theirs as they return. Only descriptors
        // on this test's own tree count: other tests open files meanwhile.
        var open = openDescriptors(under: dir.path)
        for _ in 0..<1_000 where open > 0 {
            try await Task.sleep(for: .milliseconds(10))
            open = openDescriptors(under: dir.path)
        }
        #expect(open == 0, "\(open) directories of the abandoned walks are still open")
    }
}

/// Open descriptors of this process whose path is `root` or lies under it.
func openDescriptors(under root: String) -> Int {
    guard let dir = opendir("/proc/self/fd") else { return 0 }
    defer { closedir(dir) }
    var count = 0
    var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard name.first?.isNumber == true else { continue }
        let length = readlink("/proc/self/fd/" + name, &target, target.count - 1)
        guard length > 0 else { continue }
        let path = String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if path == root || path.hasPrefix(root + "/") { count += 1 }
    }
    return count
}
