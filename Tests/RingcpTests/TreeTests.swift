import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A tree with every kind of entry ringcp handles, under `root` (made here).
func makeTree(_ root: String) throws {
    try makeDirectory(root)
    try writeFile(root + "/a.txt", "hello, ring\n")
    try writeFile(root + "/empty", [])
    try writeFile(root + "/.hidden", "dot file")
    try writeFile(root + "/with space.txt", randomBytes(777, seed: 3))
    try writeFile(root + "/big.bin", randomBytes((3 << 20) + 1, seed: 4))  // the large-file path
    try writeFile(root + "/limit.bin", randomBytes(256 << 10, seed: 5))  // the largest small file
    try writeFile(root + "/limit+1.bin", randomBytes((256 << 10) + 1, seed: 6))  // the smallest large one
    try writeFile(root + "/script.sh", "#!/bin/sh\necho hi\n", mode: 0o755)
    try writeFile(root + "/odd-mode", randomBytes(300, seed: 7), mode: 0o751)
    try writeFile(root + "/private", "secret", mode: 0o600)
    guard mkfifo(root + "/fifo", 0o640) == 0 else { throw TestFailure("mkfifo") }
    try makeSymlink(root + "/link-relative", to: "a.txt")
    try makeSymlink(root + "/link-dangling", to: "nowhere/missing")
    try makeSymlink(root + "/link-absolute", to: "/etc/hostname")
    try makeSymlink(root + "/link-to-dir", to: "sub")
    try makeDirectory(root + "/emptydir")
    try makeDirectory(root + "/sub")
    try writeFile(root + "/sub/b.txt", randomBytes(5000, seed: 8))
    try makeSymlink(root + "/sub/up", to: "../a.txt")
    try makeDirectory(root + "/sub/deeper", mode: 0o750)
    try writeFile(root + "/sub/deeper/c.txt", "c")
    try writeFile(root + "/sub/deeper/zero", [])
    try makeDirectory(root + "/sub/deeper/deepest")
    try writeFile(root + "/sub/deeper/deepest/d.bin", randomBytes(100_000, seed: 9))
    try makeDirectory(root + "/sub/deeper/deepest/empty-too")
    for i in 0..<40 {  // more small files than one batch of jobs
        try writeFile(root + "/sub/many-\(i)", randomBytes(i * 37, seed: UInt64(100 + i)))
    }
}

@Suite("ringcp -r")
struct TreeTests {
    @Test("the SHA-256 here agrees with the standard's vectors and with sha256sum")
    func sha256() async throws {
        #expect(SHA256.hex([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256.hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        let dir = Scratch()
        for (i, size) in [0, 55, 56, 63, 64, 65, 1000, (3 << 20) + 1].enumerated() {
            let path = dir.at("f\(i)")
            let contents = randomBytes(size, seed: UInt64(200 + i))
            try writeFile(path, contents)
            let line = try runTool("/usr/bin/sha256sum", [path])
            #expect(line.split(separator: " ").first.map(String.init) == SHA256.hex(contents), "size \(size)")
        }
    }

    @Test("-r gives what cp -r gives: names, types, modes, symlink targets, bytes", arguments: bothBackends)
    func matchesCp(backend: Backend) async throws {
        let dir = Scratch()
        try makeTree(dir.at("src"))
        let run = try await ringcp(["-r", "src", "ours"], in: dir.path, backend: backend, umask: 0o022)
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout.isEmpty && run.stderr.isEmpty, "\(run)")
        _ = try runTool("/bin/sh", ["-c", "umask 022 && exec cp -r src theirs"], in: dir.path)

        let ours = try snapshot(dir.at("ours"))
        let theirs = try snapshot(dir.at("theirs"))
        let source = try snapshot(dir.at("src"))
        #expect(ours.count == source.count)
        let vsCp = differences(ours, theirs)
        #expect(vsCp.isEmpty, "ringcp -r vs cp -r:\n\(vsCp.joined(separator: "\n"))")
        // Without -p, modes differ from the source only by the umask, and
        // umask 022 takes nothing from this tree's modes.
        let vsSource = differences(ours, source)
        #expect(vsSource.isEmpty, "ringcp -r vs the source:\n\(vsSource.joined(separator: "\n"))")
        // Byte identity once more, by SHA-256: sha256sum of every copied
        // file against the SHA-256 of its source's bytes.
        let files = ours.filter { $0.value.kind == .file }.keys.sorted()
        let sums = lines(try runTool("/usr/bin/sha256sum", ["--"] + files, in: dir.at("ours")))
        #expect(sums.count == files.count)
        for (file, line) in zip(files, sums) {
            #expect(line == SHA256.hex(source[file]!.bytes) + "  " + file, "\(file)")
        }
        #expect(ours["fifo"]?.kind == .fifo)
        #expect(ours["link-dangling"] == Entry(kind: .symlink, permissions: 0, target: "nowhere/missing"))
        for path in ours.keys where ours[path]!.kind == .directory {
            #expect(leftovers(in: dir.at("ours/" + path)).isEmpty)
        }
    }

    @Test("-r: files with set-user-ID, set-group-ID and sticky bits come out as cp -r makes them, without those bits",
          arguments: bothBackends)
    func specialModeBits(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("src"))
        let modes: [mode_t] = [0o4755, 0o2755, 0o1777, 0o6711, 0o644]
        for (index, mode) in modes.enumerated() {
            for copy in 0..<4 {  // several in one directory: copied together, as a batch
                try writeFile(dir.at("src/m\(index)-\(copy)"), "bits \(index)")
                chmod(dir.at("src/m\(index)-\(copy)"), mode)
            }
        }
        let run = try await ringcp(["-r", "src", "ours"], in: dir.path, backend: backend, umask: 0o022)
        #expect(run.status == 0 && run.stderr.isEmpty, "\(run)")
        _ = try runTool("/bin/sh", ["-c", "umask 022 && exec cp -r src theirs"], in: dir.path)
        func mode(_ path: String) -> mode_t {
            var status = stat()
            return lstat(path, &status) == 0 ? status.st_mode & 0o7777 : 0o7777
        }
        for index in modes.indices {
            for copy in 0..<4 {
                let name = "m\(index)-\(copy)"
                #expect(mode(dir.at("ours/" + name)) == mode(dir.at("theirs/" + name)), "\(name)")
                #expect(mode(dir.at("ours/" + name)) == mode(dir.at("src/" + name)) & 0o755, "\(name)")
            }
        }
    }

    @Test("-r of 1,000 small files with --jobs 256: all copied", arguments: bothBackends)
    func manySmallFiles(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("many"))
        for i in 0..<1000 { try writeFile(dir.at("many/f\(i)"), "file \(i)\n") }
        let run = try await ringcp(["-r", "--jobs", "256", "many", "copy"], in: dir.path, backend: backend)
        // A regression test: more requests than the SQ holds once trapped in UringBackend.fill().
        #expect(run.status == 0 && !run.signaled, "\(run.arguments) -> \(run.status), stderr: \(run.stderr.prefix(200))")
        let copied = (try? FileManager.default.contentsOfDirectory(atPath: dir.at("copy")))?.count ?? 0
        #expect(copied == 1000)
        let vs = differences(try snapshot(dir.at("copy")), try snapshot(dir.at("many")))
        #expect(vs.isEmpty, "\(vs.prefix(5))")
    }

    @Test("names that are not UTF-8 are copied byte for byte (files, a directory, a symlink's target)", arguments: bothBackends)
    func nonUTF8Names(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("src"))
        // "caf\xe9" (Latin-1) and a lone continuation byte: neither is valid UTF-8.
        let names: [[UInt8]] = [Array("caf".utf8) + [0xE9], [0x80, 0x41], Array("d".utf8) + [0xFF]]
        func raw(_ parts: [UInt8]...) -> [CChar] { parts.flatMap { $0 }.map { CChar(bitPattern: $0) } + [0] }
        let base = Array(dir.at("src").utf8) + Array("/".utf8)
        for (i, name) in names.prefix(2).enumerated() {
            let fd = open(raw(base, name), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            #expect(fd >= 0)
            let bytes = randomBytes(1000 + i, seed: UInt64(90 + i))
            #expect(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count)
            close(fd)
        }
        #expect(mkdir(raw(base, names[2]), 0o755) == 0)
        #expect(symlink(raw(names[0]), raw(base, Array("link".utf8))) == 0)
        let run = try await ringcp(["-r", "src", "copy"], in: dir.path, backend: backend)
        #expect(run.status == 0 && run.stderr.isEmpty, "\(run)")
        let copyBase = Array(dir.at("copy").utf8) + Array("/".utf8)
        for (i, name) in names.prefix(2).enumerated() {
            let fd = open(raw(copyBase, name), O_RDONLY | O_CLOEXEC)
            #expect(fd >= 0, "copy of name \(i) missing")
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &buffer, buffer.count)
            close(fd)
            #expect(Array(buffer[0..<max(n, 0)]) == randomBytes(1000 + i, seed: UInt64(90 + i)))
        }
        var s = stat()
        #expect(stat(raw(copyBase, names[2]), &s) == 0 && (s.st_mode & S_IFMT) == S_IFDIR)
        var target = [CChar](repeating: 0, count: 64)
        let n = readlink(raw(copyBase, Array("link".utf8)), &target, 63)
        #expect(n == 4 && target[0..<4].map { UInt8(bitPattern: $0) } == names[0])
    }

    @Test("-r into an existing directory puts the tree under it; -R is -r", arguments: bothBackends)
    func intoExistingDirectory(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("src"))
        try makeDirectory(dir.at("src/inner"))
        try writeFile(dir.at("src/inner/f"), "f")
        try makeDirectory(dir.at("dst"))
        let run = try await ringcp(["-R", "src", "dst"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try textOf(dir.at("dst/src/inner/f")) == "f")
    }

    @Test("-r merges into an existing copy, replacing files, keeping what only the destination has",
          arguments: bothBackends)
    func mergeIntoExistingTree(backend: Backend) async throws {
        let dir = Scratch()
        try makeTree(dir.at("src"))
        try makeDirectory(dir.at("dst"))
        try makeDirectory(dir.at("dst/sub"))
        try writeFile(dir.at("dst/sub/b.txt"), "old b")
        try writeFile(dir.at("dst/sub/extra"), "only here")
        try writeFile(dir.at("dst/big.bin"), "old big")
        try makeSymlink(dir.at("dst/link-relative"), to: "somewhere-else")
        let run = try await ringcp(["-rT", "src", "dst"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try readFile(dir.at("dst/sub/b.txt")) == readFile(dir.at("src/sub/b.txt")))
        #expect(try readFile(dir.at("dst/big.bin")) == readFile(dir.at("src/big.bin")))
        #expect(try textOf(dir.at("dst/sub/extra")) == "only here")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dir.at("dst/link-relative")) == "a.txt")
        #expect(leftovers(in: dir.at("dst")).isEmpty && leftovers(in: dir.at("dst/sub")).isEmpty)
    }

    @Test("a directory without -r is omitted with one line; the other sources are still copied",
          arguments: bothBackends)
    func directoryWithoutRecursive(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("d"))
        try makeDirectory(dir.at("t"))
        try writeFile(dir.at("f"), "file")
        let run = try await ringcp(["d", "f", "t"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: -r not specified; omitting directory 'd'"], "\(run)")
        #expect(!exists(dir.at("t/d")))
        #expect(try textOf(dir.at("t/f")) == "file")
    }

    @Test("a directory into itself is refused")
    func intoItself() async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("d"))
        try writeFile(dir.at("d/f"), "f")
        let run = try await ringcp(["-r", "d", "d/inside"], in: dir.path)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: cannot copy a directory, 'd', into itself, 'd/inside'"], "\(run)")
        #expect(!exists(dir.at("d/inside")))
    }

    @Test("without -r, a symlink operand is followed; with -r it is copied as a link", arguments: bothBackends)
    func symlinkOperand(backend: Backend) async throws {
        let dir = Scratch()
        try writeFile(dir.at("target"), "target bytes")
        try makeSymlink(dir.at("link"), to: "target")
        var run = try await ringcp(["link", "plain"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try lstatOf(dir.at("plain")).st_mode & S_IFMT == S_IFREG)
        #expect(try textOf(dir.at("plain")) == "target bytes")
        run = try await ringcp(["-r", "link", "linkcopy"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dir.at("linkcopy")) == "target")
    }
}
