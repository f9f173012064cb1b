import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The large-file path: sparse files, --verify, --progress, SIGINT.
@Suite("ringcp large files")
struct LargeFileTests {
    /// Sparse layouts: the file's size and where its 4 KiB blocks of data are.
    static let sparseLayouts: [(name: String, size: Int, blocks: [Int])] = [
        ("64 MiB, one block in the middle", 64 << 20, [32 << 20]),
        ("16 MiB, a block at the start and one at the end", 16 << 20, [0, (16 << 20) - 4096]),
        ("3 MiB, data then a trailing hole", 3 << 20, Array(stride(from: 0, to: 1 << 20, by: 4096))),
    ]

    @Test("--method channels and --direct copy large files exactly; an existing file is replaced",
          arguments: bothBackends, [["--method", "channels"], ["--direct"], ["--method", "kernel"]])
    func methods(backend: Backend, flags: [String]) async throws {
        let dir = Scratch()
        let bytes = randomBytes((5 << 20) + 4097, seed: 77)
        try writeFile(dir.at("src"), bytes)
        try writeFile(dir.at("old"), "old")
        for target in ["new", "old"] {
            let run = try await ringcp(flags + ["src", target], in: dir.path, backend: backend)
            #expect(run.status == 0 && run.stderr.isEmpty, "\(run)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: dir.at(target))) == Data(bytes), "\(flags) \(target)")
        }
    }

    @Test("a sparse file stays sparse and reads back the same", arguments: bothBackends, 0..<sparseLayouts.count)
    func sparse(backend: Backend, layout: Int) async throws {
        let (name, size, blocks) = Self.sparseLayouts[layout]
        let dir = Scratch()
        var expected = [UInt8](repeating: 0, count: size)
        let fd = open(dir.at("sparse"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw TestFailure("open") }
        defer { close(fd) }
        guard ftruncate(fd, off_t(size)) == 0 else { throw TestFailure("ftruncate") }
        for (i, offset) in blocks.enumerated() {
            let block = randomBytes(4096, seed: UInt64(41 + i))
            expected.replaceSubrange(offset..<(offset + 4096), with: block)
            guard block.withUnsafeBytes({ pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }) == 4096 else {
                throw TestFailure("pwrite")
            }
        }
        let source = try lstatOf(dir.at("sparse"))
        guard source.st_blocks * 512 < off_t(size) / 2 else {
            try Test.cancel("this file system did not keep the holes (\(source.st_blocks) blocks), skipping")
        }
        let run = try await ringcp(["sparse", "copy"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        // Once a bug (CONTRIBUTING.md, ringcp's bugs, 1): the lseeks that
        // find the data left the source's file position past it, and the
        // random read channel's offsets are relative to that position; the
        // copy now rewinds the source first.
        let verified = try await ringcp(["--verify", "sparse", "verified"], in: dir.path, backend: backend)
        let copy = try lstatOf(dir.at("copy"))
        #expect(copy.st_size == off_t(size), "\(name)")
        #expect(copy.st_blocks <= source.st_blocks + 128,
                "\(name): the copy takes \(copy.st_blocks * 512) bytes on disk, the source \(source.st_blocks * 512)")
        #expect(try readFile(dir.at("copy")) == expected, "\(name): the bytes differ")
        #expect(verified.status == 0, "--verify: \(verified)")
        // Whatever the copy did, --verify must not let a difference pass.
        if verified.status == 0 {
            #expect(try readFile(dir.at("verified")) == expected, "--verify passed a wrong copy")
        } else {
            #expect(verified.errorLines.count == 1 && verified.stderr.hasPrefix("ringcp: verify: "), "\(verified)")
        }
    }

    @Test("--verify passes on a good copy, small and large, and on a tree", arguments: bothBackends)
    func verify(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("out"))
        for (name, size) in pathSizes { try writeFile(dir.at(name), randomBytes(size, seed: 42)) }
        try writeFile(dir.at("empty"), [])
        var run = try await ringcp(["--verify", "small", "large", "empty", "out"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(run.stderr.isEmpty, "\(run)")
        for name in ["small", "large", "empty"] { #expect(try readFile(dir.at("out/" + name)) == readFile(dir.at(name))) }

        try makeTree(dir.at("tree"))
        run = try await ringcp(["-r", "--verify", "tree", "tree-copy"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(run.stderr.isEmpty, "\(run)")
    }

    @Test("--progress without a terminal prints plain lines and a final summary", arguments: bothBackends)
    func progress(backend: Backend) async throws {
        let dir = Scratch()
        try writeFile(dir.at("big"), randomBytes((3 << 20) + 1, seed: 43))
        let run = try await ringcp(["--progress", "big", "copy"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout.hasSuffix("\n"), "\(run)")
        #expect(!run.stdout.contains("\r") && !run.stdout.contains("\u{1B}"), "terminal codes without a terminal: \(run)")
        let output = run.outputLines
        #expect(output.count >= 2, "\(run)")
        let summary = output.last ?? ""
        // "copied 3.00 MiB in 0.05 s (60.0 MiB/s)"
        #expect(summary.hasPrefix("copied 3.00 MiB in ") && summary.contains(" s (") && summary.hasSuffix("/s)"),
                "\(run)")
        // The bar's last line, before the summary, shows everything done.
        let bar = output.dropLast().last ?? ""
        #expect(bar.contains("100%") && bar.contains("3.00 MiB / 3.00 MiB"), "\(run)")
        #expect(try readFile(dir.at("copy")) == readFile(dir.at("big")))

        // Without --progress, nothing on stdout when it is not a terminal.
        let quiet = try await ringcp(["big", "copy2"], in: dir.path, backend: backend)
        #expect(quiet.status == 0 && quiet.stdout.isEmpty, "\(quiet)")
    }

    @Test("on a terminal the bar is on by default, redrawn in place, and --no-progress turns it off",
          arguments: bothBackends)
    func progressOnTerminal(backend: Backend) async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/script") else {
            try Test.cancel("script(1) is missing: no pseudo-terminal to run on, skipping")
        }
        let dir = Scratch()
        try writeFile(dir.at("big"), randomBytes((3 << 20) + 1, seed: 45))
        let run = try await ringcp(["big", "copy"], in: dir.path, backend: backend, terminal: true)
        #expect(run.status == 0, "\(run)")
        // A bar is drawn from 100 ms in (a quicker copy shows only the summary):
        // "\r[####…]  64% 1.92 MiB / 3.00 MiB  …\e[K", redrawn in place, then the summary.
        if run.stdout.hasPrefix("\r[") {
            #expect(run.stdout.contains("\u{1B}[K"), "\(run)")
            #expect(run.stdout.contains("100% 3.00 MiB / 3.00 MiB"), "\(run)")
        }
        let last = lines(run.stdout.replacingOccurrences(of: "\r\n", with: "\n")).last ?? ""
        #expect(last.hasPrefix("copied 3.00 MiB in ") && last.hasSuffix("/s)"), "\(run)")
        #expect(try readFile(dir.at("copy")) == readFile(dir.at("big")))

        let quiet = try await ringcp(["--no-progress", "big", "copy2"], in: dir.path, backend: backend, terminal: true)
        #expect(quiet.status == 0 && quiet.stdout.isEmpty, "\(quiet)")
    }

    /// When the interrupt tests send SIGINT.
    enum Moment: String, CustomStringConvertible, CaseIterable, Sendable {
        /// Bytes are being written: the copy is well under way.
        case midCopy = "mid-copy"
        /// The temporary file exists and ringcp catches SIGINT.
        case handlerReady = "the handler is ready"
        /// The temporary file exists, whatever ringcp has installed by then.
        case fileCreated = "the file is created"

        var description: String { rawValue }
    }

    @Test("SIGINT during a large copy: exit 130, the old destination intact, no temporary file",
          arguments: bothBackends, Moment.allCases)
    func interrupt(backend: Backend, moment: Moment) async throws {
        let dir = Scratch()
        // Mid-copy: a large file, so the copy is still running when it is interrupted;
        // at the start: a smaller one, so that a lost SIGINT costs little.
        let size = moment == .midCopy ? 512 << 20 : 64 << 20
        // Allocated, not written: fast to make, read back as zeros, not a
        // hole (st_blocks covers the size, so ringcp copies it all).
        let fd = open(dir.at("huge"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw TestFailure("open") }
        let allocated = posix_fallocate(fd, 0, off_t(size))
        close(fd)
        guard allocated == 0 else { try Test.cancel("posix_fallocate failed (\(allocated)), skipping") }
        let old = randomBytes(10_000, seed: 44)
        try writeFile(dir.at("dst"), old)
        let oldInode = try lstatOf(dir.at("dst")).st_ino

        let child = try Child(["huge", "dst"], in: dir.path, backend: backend)
        let pid = child.process.processIdentifier
        func ready() -> Bool {
            guard let temporary = leftovers(in: dir.path).first else { return false }
            switch moment {
            case .fileCreated: return true
            case .handlerReady: return catchesSIGINT(pid)
            case .midCopy: return catchesSIGINT(pid) && ((try? lstatOf(dir.at(temporary)).st_blocks) ?? 0) > 0
            }
        }
        let deadline = Date().addingTimeInterval(20)
        while child.isRunning && !ready() && Date() < deadline { try await Task.sleep(for: .microseconds(200)) }
        let interrupted = child.isRunning
        if interrupted { child.interrupt() }
        let run = try await child.finished(timeout: 8)

        let check = {
            #expect(!run.hung, "ringcp did not exit after SIGINT: \(run)")
            #expect(!run.signaled, "SIGINT killed ringcp instead of being handled: \(run)")
            #expect(leftovers(in: dir.path).isEmpty, "left behind: \(leftovers(in: dir.path))")
            if run.hung || run.signaled { return }
            if run.status == 130 {
                #expect(run.errorLines == ["ringcp: interrupted; nothing half-copied is left behind"], "\(run)")
                #expect((try? readFile(dir.at("dst"))) == old, "the old destination changed")
                #expect((try? lstatOf(dir.at("dst")).st_ino) == oldInode)
            } else {
                // The copy won the race (or never saw the signal): it must then be complete.
                #expect(run.status == 0, "\(run)")
                #expect((try? lstatOf(dir.at("dst")).st_size) == off_t(size))
            }
        }
        // The early moments once found two bugs: signals handled only after
        // the copy started, and a cancellation before ChannelCopy.run().
        check()
    }
}

/// Whether process `pid` catches SIGINT now (its SigCgt mask in /proc).
func catchesSIGINT(_ pid: Int32) -> Bool {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
          let mask = UInt64(line.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16) else {
        return false
    }
    return mask & (1 << (UInt64(SIGINT) - 1)) != 0
}
