#if DEBUG
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOBase

/// `IO.copyItem` with `atomically` copies a directory's small files in
/// batches too (`SmallFileBatch`): each file written under a temporary name
/// made relative to the destination directory, then renamed onto its own.
/// The bytes, modes and times of a tree; a file already there replaced (a
/// new inode: a hard link to the old one keeps the old bytes); failures in
/// the middle of a batch (ENOSPC on a 1 MiB tmpfs, a rename refused by
/// `exclusive`) leave no temporary and nothing partial under a final name,
/// and the source as it was. On `IOEngine.shared`: the suite runs on both
/// backends as the whole target does.
@Suite("copyItem atomically: batches with a temporary per file")
struct CopyItemAtomicTests {
    /// Names under `root` (recursively) that are temporaries of a copy.
    static func temporaries(under root: String) -> [String] {
        guard let names = FileManager.default.enumerator(atPath: root) else { return [] }
        return names.compactMap { $0 as? String }.filter { $0.contains(".ringio-") }
    }

    static func modificationTime(_ path: String) -> timespec {
        var status = stat()
        guard lstat(path, &status) == 0 else { return timespec() }
        return status.st_mtim
    }

    static func inode(_ path: String) -> ino_t {
        var status = stat()
        guard lstat(path, &status) == 0 else { return 0 }
        return status.st_ino
    }

    /// The source tree's bytes, read back (to show it was not touched).
    static func snapshot(_ files: [String: [UInt8]], in root: String) throws -> Bool {
        try files.allSatisfy { name, bytes in try readFile(root + "/" + name) == bytes }
    }

    @Test("every file's bytes, mode and time with preserve, 1, 8 and 64 copies at once; a file there is replaced by rename (a new inode), no temporary left")
    func tree() async throws {
        let dir = TemporaryDirectory()
        let files = try CopyItemBatchTests.makeTree(dir)
        for (index, name) in files.keys.sorted().enumerated() where index % 3 == 0 {
            var times = [timespec(tv_sec: 1_000_000 + index, tv_nsec: 0), timespec(tv_sec: 2_000_000 + index, tv_nsec: 500)]
            #expect(utimensat(AT_FDCWD, dir.file("src/" + name), &times, AT_SYMLINK_NOFOLLOW) == 0)
        }
        for width in CopyItemBatchTests.widths {
            let destination = dir.file("dst\(width)")
            Tree.mkdir(destination)
            Tree.mkdir(destination + "/d0")
            // The old d0/f5, also reachable as `kept`: replaced, not written through.
            try writeFile(destination + "/d0/f5", Array("older and longer than the new bytes".utf8))
            #expect(link(destination + "/d0/f5", destination + "/kept") == 0)
            var options = IO.CopyOptions(atomically: true)
            options.preserve = [.permissions, .times]
            options.maximumConcurrentCopies = width
            try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(destination), options: options)
            for (name, bytes) in files {
                #expect(try readFile(destination + "/" + name) == bytes, "\(name), width \(width)")
                #expect(CopyItemBatchTests.mode(destination + "/" + name) == CopyItemBatchTests.mode(dir.file("src/" + name)),
                        "\(name), width \(width)")
                let (copied, original) = (Self.modificationTime(destination + "/" + name),
                                          Self.modificationTime(dir.file("src/" + name)))
                #expect(copied.tv_sec == original.tv_sec && copied.tv_nsec == original.tv_nsec, "\(name), width \(width)")
            }
            #expect(try readFile(destination + "/kept") == Array("older and longer than the new bytes".utf8))
            #expect(Self.inode(destination + "/kept") != Self.inode(destination + "/d0/f5"))
            #expect(Self.temporaries(under: destination).isEmpty, "\(Self.temporaries(under: destination))")
        }
        #expect(try Self.snapshot(files, in: dir.file("src")), "the source changed")
    }

    @Test("the batch itself copies atomically: every small file copied by it (none left to the general path), renamed from a temporary")
    func batchCopiesAtomically() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("src"))
        Tree.mkdir(dir.file("dst"))
        var items: [SmallFileBatch.Item] = []
        var contents: [[UInt8]] = []
        for f in 0..<40 {
            let bytes = randomBytes(f * 100, seed: UInt64(500 + f))
            try writeFile(dir.file("src/f\(f)"), bytes)
            contents.append(bytes)
            items.append(SmallFileBatch.Item(name: FilePath.Component("f\(f)")!, source: FilePath(dir.file("src/f\(f)")),
                                             destination: FilePath(dir.file("dst/f\(f)"))))
        }
        // One already there, held by a second name: replaced, not written through.
        try writeFile(dir.file("dst/f7"), Array("old".utf8))
        #expect(link(dir.file("dst/f7"), dir.file("old")) == 0)
        let results = await SmallFileBatch.copy(items, from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")),
                                                settings: SmallFileBatch.Settings(IO.CopyOptions(atomically: true)))
        for (f, result) in results.enumerated() {
            guard case .copied(let bytes) = result else {
                Issue.record("f\(f): \(result)")
                continue
            }
            #expect(bytes == Int64(f * 100))
            #expect(try readFile(dir.file("dst/f\(f)")) == contents[f], "f\(f)")
        }
        #expect(try readFile(dir.file("old")) == Array("old".utf8))
        #expect(Self.temporaries(under: dir.file("dst")).isEmpty)
    }

    @Test("exclusive: a file in the way fails at the rename (EEXIST) with its old bytes kept and no temporary; the batch's other files are copied")
    func renameRefused() async throws {
        let dir = TemporaryDirectory()
        let files = try CopyItemBatchTests.makeTree(dir)
        Tree.mkdir(dir.file("dst"))
        Tree.mkdir(dir.file("dst/d1"))
        Tree.touch(dir.file("dst/d1/f10"), "in the way")
        var options = IO.CopyOptions(atomically: true, exclusive: true)
        options.maximumConcurrentCopies = 64
        let errors = Locked<[IOError]>([])
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")), options: options,
                              onEntry: { entry in
            entry.type == .directory && (entry.isTop || entry.source.lastComponent?.string == "d1") ? .copied : .copy
        }, onError: { error in
            errors.withLock { $0.append(error) }
            return .continue
        })
        let seen = errors.withLock { $0 }
        #expect(seen.count == 1 && seen.first?.errno == .fileExists && seen.first?.side == .destination
                && seen.first?.path?.string == dir.file("dst/d1/f10"), "\(seen)")
        #expect(try readFile(dir.file("dst/d1/f10")) == Array("in the way".utf8))
        for (name, bytes) in files where name != "d1/f10" {
            #expect(try readFile(dir.file("dst/" + name)) == bytes, "\(name)")
        }
        #expect(Self.temporaries(under: dir.file("dst")).isEmpty, "\(Self.temporaries(under: dir.file("dst")))")
        #expect(try Self.snapshot(files, in: dir.file("src")), "the source changed")
    }

    @Test("ENOSPC in the middle of a batch (1 MiB tmpfs): every failure reported, no temporary left, each final name absent, old, or whole; the source as it was")
    func noSpace() async throws {
        let dir = TemporaryDirectory()
        let (mounted, full) = try FullFilesystemTests.smallFilesystem()
        defer { umount2(full, Int32(MNT_DETACH)); _ = mounted }
        // 48 files of 40 KiB (1.9 MiB) into 1 MiB, an old file among them.
        Tree.mkdir(dir.file("src"))
        var files: [String: [UInt8]] = [:]
        for f in 0..<48 {
            let bytes = randomBytes(40 << 10, seed: UInt64(700 + f))
            try writeFile(dir.file("src/f\(f)"), bytes)
            files["f\(f)"] = bytes
        }
        let destination = full + "/dst"
        Tree.mkdir(destination)
        let old = Array("the old f40".utf8)
        try writeFile(destination + "/f40", old)
        var options = IO.CopyOptions(atomically: true)
        options.maximumConcurrentCopies = 64
        let errors = Locked<[IOError]>([])
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(destination), options: options,
                              onEntry: { entry in entry.isTop ? .copied : .copy },
                              onError: { error in
            errors.withLock { $0.append(error) }
            return .continue
        })
        let seen = errors.withLock { $0 }
        #expect(!seen.isEmpty && seen.allSatisfy { $0.errno == .noSpace && $0.side == .destination }, "\(seen)")
        #expect(Self.temporaries(under: destination).isEmpty, "\(Self.temporaries(under: destination))")
        var whole = 0
        for (name, bytes) in files {
            let path = destination + "/" + name
            guard Tree.exists(path) else {
                #expect(seen.contains { $0.path?.string == path }, "\(name) missing, no error for it")
                continue
            }
            let found = try readFile(path)
            if found == bytes {
                whole += 1
            } else {
                #expect(name == "f40" && found == old, "\(name): \(found.count) bytes, neither old nor whole")
                #expect(seen.contains { $0.path?.string == path }, "\(name) not copied, no error for it")
            }
        }
        #expect(whole > 0 && whole + seen.count == files.count, "\(whole) whole, \(seen.count) errors")
        // Without a handler: the first failure is thrown, and still nothing
        // is left half-written (the first copy removed: room for some files).
        try FileManager.default.removeItem(atPath: destination)
        let second = full + "/dst2"
        let error = await #expect(throws: IOError.self) {
            try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(second), options: options)
        }
        #expect(error?.errno == .noSpace, "\(String(describing: error))")
        #expect(Self.temporaries(under: full).isEmpty, "\(Self.temporaries(under: full))")
        for (name, bytes) in files where Tree.exists(second + "/" + name) {
            #expect(try readFile(second + "/" + name) == bytes, "\(name) in dst2 is partial")
        }
        #expect(try Self.snapshot(files, in: dir.file("src")), "the source changed")
    }
}
#endif
