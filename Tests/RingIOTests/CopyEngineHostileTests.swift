#if DEBUG
#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOBase
@testable import RingIOCopy
@testable import RingIOFiles

/// The copy engine and `copyItem` against hostile conditions: a disk that
/// fills in the middle of a copy, a directory that cannot be read in the
/// middle of a tree, symlink loops, names that are not UTF-8; and what
/// `CopyOptions.preserve` keeps. Faults come from the system-call seam's
/// mock (debug builds), scoped to each test's directory. `copyItem` runs
/// on `IOEngine.shared`: the suite runs on both backends as the whole
/// target does (`RINGIO_BACKEND=threadpool`).
@Suite("Copy engine: hostile cases")
struct CopyEngineHostileTests {
    /// Whether files in `dir` are on ext4 (the copy splices through one
    /// pipe there; elsewhere `copy_file_range` copies 64 MiB a call).
    static func onExt4(_ dir: String) throws -> Bool {
        let fd = try FileDescriptor.open(FilePath(dir), .readOnly)
        defer { try? fd.close() }
        return IO.preallocationHelps(fd.rawValue)
    }

    @Test("ENOSPC in the middle of a large copy (after 1 MiB is in): the copy fails on the destination side, nothing is left under the final name",
          arguments: allBackends, [true, false])
    func noSpaceMidCopy(backend: IOEngine.Backend, atomically: Bool) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes((4 << 20) + 123, seed: 71)
        try writeFile(dir.file("src"), bytes)
        if atomically { try writeFile(dir.file("dst"), Array("old".utf8)) }
        // ext4: splice in, splice out per 1 MiB piece; the 4th call is the second piece's write.
        let ext4 = try Self.onExt4(dir.path)
        let enospc = ext4
            ? Syscall.Mock.inject(.splice, errno: .noSpace, times: 1, after: 3, scope: .files(under: FilePath(dir.path)))
            : Syscall.Mock.inject(.copyFileRange, errno: .noSpace, times: 1, scope: .files(under: FilePath(dir.path)))
        defer { enospc.remove() }
        let moved = Locked(0)
        var copier = FileCopier(engine: engine)
        copier.replace = atomically ? .atomic : .inPlace
        copier.progress = { n in moved.withLock { $0 += n } }
        await expectCopyError(.noSpace, side: .destination) {
            try await copier.copy(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
        }
        #expect(enospc.fired == 1)
        if ext4 { #expect(moved.withLock { $0 } == 1 << 20, "one piece was in before the disk filled") }
        if atomically {
            #expect(try readFile(dir.file("dst")) == Array("old".utf8), "the old file stays whole")
            #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "dst"]) == [])
        } else {
            #expect(!Tree.exists(dir.file("dst")), "the file this copy created is removed")
            #expect(CopyFileTests.leftovers(dir.path, keeping: ["src"]) == [])
        }
    }

    @Test("ENOSPC in the middle of a tree: copyItem stops with the file that failed, on the destination side; nothing under its name",
          arguments: [true, false])
    func noSpaceMidTree(atomically: Bool) async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("src"))
        _ = Tree.make(dir.file("src"), directories: 4, files: 10)
        for d in 0..<4 { Tree.touch(dir.file("src/d\(d)/data"), String(repeating: "x", count: 5000)) }
        Tree.mkdir(dir.file("dst"))
        Tree.mkdir(dir.file("dst/d2"))
        let enospc = Syscall.Mock.inject(.write, errno: .noSpace, times: 1, scope: .files(under: FilePath(dir.file("dst/d2"))))
        defer { enospc.remove() }
        let error = await #expect(throws: IOError.self) {
            try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")),
                                  options: .init(atomically: atomically))
        }
        #expect(enospc.fired == 1)
        #expect(error?.errno == .noSpace && error?.side == .destination, "\(String(describing: error))")
        let failed = try #require(error?.path?.string)
        #expect(failed.hasPrefix(dir.file("dst/d2/")), "names the entry: \(failed)")
        #expect(!Tree.exists(failed), "nothing half-written under \(failed)")
        #expect(CopyFileTests.leftovers(dir.file("dst/d2"), keeping: Set((0..<10).map { "f\($0)" } + ["data"]))
                == [], "no temporary left")
    }

    @Test("EACCES in the middle of a tree (a directory that cannot be opened): copyItem stops with an error that names it, on the source side")
    func deniedMidTree() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("src"))
        _ = Tree.make(dir.file("src"), directories: 5, files: 5)
        Tree.mkdir(dir.file("src/d3/deep"))
        Tree.touch(dir.file("src/d3/deep/f"), "f")
        // As root a mode of 0 would not stop the walk: the seam refuses the open instead.
        let eacces = Syscall.Mock.inject(.openat, errno: .permissionDenied, times: 1,
                                         scope: .files(under: FilePath(dir.file("src/d3/deep"))))
        defer { eacces.remove() }
        let error = await #expect(throws: IOError.self) {
            try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
        }
        #expect(eacces.fired == 1)
        #expect(error?.errno == .permissionDenied && error?.side == .source, "\(String(describing: error))")
        #expect(error?.path?.string == dir.file("src/d3/deep"), "\(String(describing: error))")
        // What was made is the owner's to remove: no directory was left unwritable.
        #expect(try await IO.removeItem(at: FilePath(dir.file("dst")), recursively: true) > 0)
    }

    @Test("symlink loops: copyItem copies the links as links and ends; copyFile through a loop fails with ELOOP on the source side")
    func symlinkLoops() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("src"))
        Tree.mkdir(dir.file("src/sub"))
        Tree.touch(dir.file("src/sub/f"), "data")
        Tree.symlink("loop2", dir.file("src/loop1"))
        Tree.symlink("loop1", dir.file("src/loop2"))
        Tree.symlink(".", dir.file("src/sub/self"))
        Tree.symlink("..", dir.file("src/sub/up"))
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
        let copy = try await listing(dir.file("dst"), recursive: true)
        #expect(copy.count == 6, "\(copy)")
        for link in ["loop1", "loop2", "sub/self", "sub/up"] {
            #expect(copy[dir.file("dst/\(link)")] == .symlink, "\(link)")
        }
        #expect(try await IO.destinationOfSymbolicLink(at: FilePath(dir.file("dst/loop1"))) == "loop2")
        #expect(try await IO.destinationOfSymbolicLink(at: FilePath(dir.file("dst/sub/up"))) == "..")
        // A link at the root is copied as a link too.
        try await IO.copyItem(from: FilePath(dir.file("src/loop1")), to: FilePath(dir.file("lone")))
        #expect(try await IO.info(at: FilePath(dir.file("lone")), followingSymlinks: false).type == .symlink)
        // Followed, it never resolves.
        await expectCopyError(.tooManySymbolicLinkLevels, side: .source) {
            try await IO.copyFile(from: FilePath(dir.file("src/loop1")), to: FilePath(dir.file("out")))
        }
        #expect(!Tree.exists(dir.file("out")))
    }

    @Test("names that are not UTF-8: copied byte for byte, a file and a directory with its entry")
    func nonUTF8Names() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("src"))
        let fileName: [UInt8] = [0x66, 0xFF, 0xFE, 0x2E, 0x74]  // "f", two bytes no UTF-8 has, ".t"
        let dirName: [UInt8] = [0x64, 0xC3, 0x28]                 // "d", a truncated sequence
        Tree.touch(in: dir.file("src"), rawName: fileName)
        let rawDirectory = Array(dir.file("src").utf8) + [UInt8(ascii: "/")] + dirName + [0]
        #expect(rawDirectory.withUnsafeBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { Glibc.mkdir($0.baseAddress!, 0o755) }
        } == 0)
        let rawFile = Array(dir.file("src").utf8) + [UInt8(ascii: "/")] + dirName + [UInt8(ascii: "/")] + fileName + [0]
        let fd = rawFile.withUnsafeBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644) }
        }
        #expect(fd >= 0)
        if fd >= 0 { close(fd) }
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
        var names: Set<[UInt8]> = []
        for try await entry in IO.directoryEntries(at: FilePath(dir.file("dst")), recursive: true) {
            var relative = entry.path
            _ = relative.removePrefix(FilePath(dir.file("dst")))
            names.insert(relative.withPlatformString { Array(UnsafeBufferPointer(start: $0, count: strlen($0))).map { UInt8(bitPattern: $0) } })
        }
        #expect(names == [fileName, dirName, dirName + [UInt8(ascii: "/")] + fileName], "\(names)")
    }

    @Test("preserve .all: a tree's files, symlinks and directories keep their permissions (set-user-ID, a read-only directory), times and owner")
    func preserveTree() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("src"))
        Tree.mkdir(dir.file("src/ro"))
        Tree.touch(dir.file("src/ro/f"), "in a read-only directory")
        Tree.touch(dir.file("src/big"), String(repeating: "b", count: IO.smallFileLimit + 10))
        Tree.touch(dir.file("src/suid"), "s")
        Tree.symlink("suid", dir.file("src/link"))
        chmod(dir.file("src/suid"), 0o4751)
        chmod(dir.file("src/big"), 0o600)
        let root = geteuid() == 0
        if root { #expect(chown(dir.file("src/big"), 4321, 4322) == 0) }
        let past = timespec(tv_sec: 1_000_000_000, tv_nsec: 123_456_789)
        for (path, flags) in [("src/ro/f", 0), ("src/big", 0), ("src/suid", 0), ("src/link", AT_SYMLINK_NOFOLLOW),
                              ("src/ro", 0), ("src", 0)] {
            var times = [past, past]
            #expect(utimensat(AT_FDCWD, dir.file(path), &times, flags) == 0, "\(path)")
        }
        chmod(dir.file("src/ro"), 0o555)
        defer { chmod(dir.file("src/ro"), 0o755); chmod(dir.file("dst/ro"), 0o755) }
        var options = IO.CopyOptions()
        options.preserve = .all
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")), options: options)
        for path in ["ro/f", "big", "suid", "link", "ro", ""] {
            let source = try await IO.info(at: FilePath(dir.file("src/" + path)), followingSymlinks: false)
            let copy = try await IO.info(at: FilePath(dir.file("dst/" + path)), followingSymlinks: false)
            #expect(copy.type == source.type, "\(path)")
            #expect(copy.modificationTime == source.modificationTime, "\(path): \(copy.modificationTime)")
            #expect(copy.modificationTime.seconds == 1_000_000_000, "\(path)")
            if source.type != .symlink { #expect(copy.permissions == source.permissions, "\(path)") }
            #expect(copy.groupID == source.groupID, "\(path)")
            if root { #expect(copy.ownerID == source.ownerID, "\(path)") }
        }
        #expect(try await IO.info(at: FilePath(dir.file("dst/ro"))).permissions.rawValue == 0o555)
        #expect(try await IO.info(at: FilePath(dir.file("dst/suid"))).permissions.rawValue == 0o4751)
        if root { #expect(try await IO.info(at: FilePath(dir.file("dst/big"))).ownerID == 4321) }
        // Without preserve: no times kept, and a read-only directory still gets its entries.
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("plain")))
        defer { chmod(dir.file("plain/ro"), 0o755) }
        #expect(try await IO.readFile(at: FilePath(dir.file("plain/ro/f"))) == DataChunk("in a read-only directory".utf8))
        #expect(try await IO.info(at: FilePath(dir.file("plain/ro"))).permissions.rawValue == 0o555)
        #expect(try await IO.info(at: FilePath(dir.file("plain/big"))).modificationTime.seconds != 1_000_000_000)
    }
}
#endif
