#if DEBUG
#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOBase

/// `IO.copyItem` copies a directory's small regular files in batches
/// (`SmallFileBatch`: one pool worker, each file opened by its name in the
/// two directories): the bytes and modes of every kind of file around the
/// batch (empty, one byte, a page, one past the small-file limit, a
/// symlink), a file already there, a failure in the middle of a batch, and
/// `CopyOptions.copiesSpecialModeBits`. On `IOEngine.shared`: the suite runs
/// on both backends as the whole target does.
@Suite("copyItem: a directory's small files in batches")
struct CopyItemBatchTests {
    /// The sizes of the files of each directory, in turn: more than two
    /// batches of 32, a larger file among them.
    static let sizes = [0, 1, 4096, 4097, 10_000, 65_536]

    /// src/d0..d2, 70 files each (`f0`...), seeded bytes, modes 0o600/0o640/0o644/0o755;
    /// d1/big one byte past the small-file limit; d2/link -> f1.
    static func makeTree(_ dir: TemporaryDirectory) throws -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        let modes: [mode_t] = [0o600, 0o640, 0o644, 0o755]
        Tree.mkdir(dir.file("src"))
        for d in 0..<3 {
            Tree.mkdir(dir.file("src/d\(d)"))
            for f in 0..<70 {
                let name = "d\(d)/f\(f)"
                let bytes = randomBytes(sizes[f % sizes.count], seed: UInt64(d * 100 + f))
                try writeFile(dir.file("src/" + name), bytes)
                chmod(dir.file("src/" + name), modes[f % modes.count])
                files[name] = bytes
            }
        }
        let big = randomBytes(IO.smallFileLimit + 1, seed: 7)
        try writeFile(dir.file("src/d1/big"), big)
        files["d1/big"] = big
        Tree.symlink("f1", dir.file("src/d2/link"))
        return files
    }

    static func mode(_ path: String) -> mode_t {
        var status = stat()
        guard lstat(path, &status) == 0 else { return 0 }
        return status.st_mode & 0o7777
    }

    /// The process's umask, read without changing it.
    static func umaskNow() -> mode_t {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("Umask:") }
        return line.flatMap { mode_t($0.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8) } ?? 0o022
    }

    @Test("every file's bytes and mode (under the umask), with 1, 8 and 64 copies at once; a file already there is written in place")
    func bytesAndModes() async throws {
        let dir = TemporaryDirectory()
        let files = try Self.makeTree(dir)
        let umask = Self.umaskNow()
        for width in [1, 8, 64] {
            let destination = dir.file("dst\(width)")
            Tree.mkdir(destination)
            Tree.mkdir(destination + "/d0")
            try writeFile(destination + "/d0/f5", Array("older and longer than the new bytes".utf8))
            chmod(destination + "/d0/f5", 0o600)
            var options = IO.CopyOptions()
            options.maximumConcurrentCopies = width
            try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(destination), options: options)
            for (name, bytes) in files {
                #expect(try readFile(destination + "/" + name) == bytes, "\(name), width \(width)")
                if name != "d0/f5" {
                    #expect(Self.mode(destination + "/" + name) == Self.mode(dir.file("src/" + name)) & ~umask,
                            "\(name), width \(width)")
                }
            }
            // Written in place: it keeps its own mode.
            #expect(Self.mode(destination + "/d0/f5") == 0o600)
            var target = [CChar](repeating: 0, count: 64)
            #expect(readlink(destination + "/d2/link", &target, 63) == 2)
        }
    }

    @Test("exclusive: a file already there fails with EEXIST naming it, once; the rest of its batch is copied (onError .continue)")
    func failureInABatch() async throws {
        let dir = TemporaryDirectory()
        let files = try Self.makeTree(dir)
        Tree.mkdir(dir.file("dst"))
        Tree.mkdir(dir.file("dst/d1"))
        Tree.touch(dir.file("dst/d1/f10"), "in the way")
        var options = IO.CopyOptions(exclusive: true)
        options.maximumConcurrentCopies = 64
        let errors = Locked<[IOError]>([])
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")), options: options,
                              onEntry: { entry in
            // The top and d1 are there already: used as they are.
            entry.type == .directory && (entry.isTop || entry.source.lastComponent?.string == "d1") ? .copied : .copy
        }, onError: { error in
            errors.withLock { $0.append(error) }
            return .continue
        })
        let seen = errors.withLock { $0 }
        #expect(seen.count == 1, "\(seen)")
        #expect(seen.first?.errno == .fileExists && seen.first?.side == .destination
                && seen.first?.path?.string == dir.file("dst/d1/f10"), "\(seen)")
        #expect(try readFile(dir.file("dst/d1/f10")) == Array("in the way".utf8))
        for (name, bytes) in files where name != "d1/f10" {
            #expect(try readFile(dir.file("dst/" + name)) == bytes, "\(name)")
        }
        // Without a handler the copy throws the first error: a directory where a file goes.
        Tree.mkdir(dir.file("dst2"))
        Tree.mkdir(dir.file("dst2/f3"))
        let error = await #expect(throws: IOError.self) {
            var options = IO.CopyOptions()
            options.maximumConcurrentCopies = 64
            try await IO.copyItem(from: FilePath(dir.file("src/d2")), to: FilePath(dir.file("dst2")), options: options)
        }
        #expect(error?.errno == .isDirectory && error?.path?.string == dir.file("dst2/f3"), "\(String(describing: error))")
    }

    @Test("copiesSpecialModeBits false: a new file takes no set-user-ID, set-group-ID or sticky bit (tree and copyFile); true by default")
    func specialModeBits() async throws {
        let dir = TemporaryDirectory()
        let umask = Self.umaskNow()
        Tree.mkdir(dir.file("src"))
        let modes: [mode_t] = [0o4755, 0o2755, 0o1777, 0o6711]
        for (index, mode) in modes.enumerated() {
            for copy in 0..<3 { Tree.touch(dir.file("src/s\(index)-\(copy)"), "bits") }
            for copy in 0..<3 { chmod(dir.file("src/s\(index)-\(copy)"), mode) }
        }
        var options = IO.CopyOptions()
        options.copiesSpecialModeBits = false
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("plain")), options: options)
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("kept")))
        try await IO.copyFile(from: FilePath(dir.file("src/s0-0")), to: FilePath(dir.file("one")), options: options)
        for index in 0..<4 {
            for copy in 0..<3 {
                let name = "s\(index)-\(copy)"
                let source = Self.mode(dir.file("src/" + name))
                #expect(Self.mode(dir.file("plain/" + name)) == source & 0o777 & ~umask, "\(name)")
                #expect(Self.mode(dir.file("kept/" + name)) == source & ~umask, "\(name)")
            }
        }
        #expect(Self.mode(dir.file("one")) == Self.mode(dir.file("src/s0-0")) & 0o777 & ~umask)
    }
}
#endif
