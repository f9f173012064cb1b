import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Where cp refuses to lose data or to leak it: symlinks made by the same
/// run, FIFOs, signals while blocked, modes and owners under -p.
@Suite("ringcp safety")
struct SafetyTests {
    @Test("never writes through a symlink this run made (coreutils abuse.sh), dangling or not",
          arguments: bothBackends, [false, true])
    func justCreatedSymlink(backend: Backend, targetExists: Bool) async throws {
        let dir = Scratch()
        for name in ["a", "b", "c"] { try makeDirectory(dir.at(name)) }
        try makeSymlink(dir.at("a/1"), to: "../t")
        try writeFile(dir.at("b/1"), "payload\n")
        if targetExists { try writeFile(dir.at("t"), "i\n") }
        let run = try await ringcp(["-R", "a/1", "b/1", "c"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: will not copy 'b/1' through just-created symlink 'c/1'"], "\(run)")
        if targetExists {
            #expect(try textOf(dir.at("t")) == "i\n", "the file outside the destination changed")
        } else {
            #expect(!exists(dir.at("t")), "a file was made outside the destination")
        }
    }

    /// Starts `cat fifo > out`, the FIFO's one reader.
    static func reader(of fifo: String, into out: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "exec cat \"$0\" > \"$1\"", fifo, out]
        try process.run()
        return process
    }

    @Test("a file copied onto an existing FIFO: its reader gets the bytes once, the FIFO stays a FIFO (small, large, --in-place; coreutils sparse-to-pipe.sh)",
          arguments: bothBackends, [(3000, false), ((1 << 20) + 7, false), ((1 << 20) + 7, true)])
    func ontoFIFO(backend: Backend, sizeAndInPlace: (Int, Bool)) async throws {
        let (size, inPlace) = sizeAndInPlace
        let dir = Scratch()
        let data = randomBytes(size, seed: 91)
        try writeFile(dir.at("src"), data)
        guard mkfifo(dir.at("fifo"), 0o644) == 0 else { throw TestFailure("mkfifo") }
        let reader = try Self.reader(of: dir.at("fifo"), into: dir.at("out"))
        let run = try await ringcp((inPlace ? ["--in-place"] : []) + ["src", "fifo"], in: dir.path, backend: backend)
        // ringcp's close of the FIFO is the reader's end of file.
        let deadline = Date().addingTimeInterval(20)
        while reader.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
        if reader.isRunning { reader.terminate() }
        #expect(run.status == 0 && run.stderr.isEmpty, "\(run)")
        #expect(try lstatOf(dir.at("fifo")).st_mode & S_IFMT == S_IFIFO, "the FIFO was replaced")
        let got = try readFile(dir.at("out"))
        #expect(got.count == size && got == data, "the reader got \(got.count) bytes of \(size)")
    }

    @Test("SIGTERM while blocked opening a FIFO that has no reader: ends as cp does (143)", arguments: bothBackends)
    func sigtermWhileBlocked(backend: Backend) async throws {
        let dir = Scratch()
        try writeFile(dir.at("src"), "x")
        guard mkfifo(dir.at("fifo"), 0o644) == 0 else { throw TestFailure("mkfifo") }
        let child = try Child(["src", "fifo"], in: dir.path, backend: backend)
        // Until one of its threads waits in the FIFO's open (its handlers are in place by then).
        let pid = child.process.processIdentifier
        func blockedInOpen() -> Bool {
            let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            return threads.contains { thread in
                let wchan = (try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/wchan", encoding: .utf8)) ?? ""
                return wchan.contains("wait_for_partner") || wchan.contains("fifo")
            }
        }
        let deadline = Date().addingTimeInterval(20)
        while child.isRunning && !(catchesSIGINT(pid) && blockedInOpen()) && Date() < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(blockedInOpen(), "ringcp never blocked in the FIFO's open")
        kill(child.process.processIdentifier, SIGTERM)
        let run = try await child.finished(timeout: 10)
        #expect(!run.hung, "ringcp ignored SIGTERM while blocked: \(run)")
        #expect(run.status == 143, "\(run)")
    }

    @Test("-p keeps a new file owner-only until its data is in (coreutils file-perm-race.sh)", arguments: bothBackends)
    func ownerOnlyWhileWriting(backend: Backend) async throws {
        let dir = Scratch()
        guard mkfifo(dir.at("fifo"), 0o644) == 0 else { throw TestFailure("mkfifo") }
        let child = try Child(["-p", "fifo", "dst"], in: dir.path, backend: backend)
        // The writer: ringcp's open of the FIFO waits for it.
        let fd = open(dir.at("fifo"), O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw TestFailure("open fifo") }
        _ = write(fd, "a", 1)
        let deadline = Date().addingTimeInterval(20)
        while !exists(dir.at("dst")) && child.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(2)) }
        let whileWriting = try permissions(dir.at("dst"))
        close(fd)
        let run = try await child.finished()
        #expect(whileWriting & 0o077 == 0, "the file was \(String(whileWriting, radix: 8)) while being written")
        #expect(run.status == 0, "\(run)")
        #expect(try permissions(dir.at("dst")) == 0o644)
        #expect(try textOf(dir.at("dst")) == "a")
    }

    @Test("-p by a user who cannot keep the owner: setuid/setgid cleared, a group the user is in kept (coreutils special-bits.sh, preserve-gid.sh)", arguments: bothBackends, pathSizes.map(\.size))
    func preserveAsUser(backend: Backend, size: Int) async throws {
        let dir = try FailureTests.nobodyScratch()
        let group: gid_t = 4242  // a supplementary group of the user (setpriv --groups)
        try makeDirectory(dir.at("out"), mode: 0o777)
        try writeFile(dir.at("setid"), randomBytes(size, seed: 3), mode: 0o6755)
        try writeFile(dir.at("grouped"), randomBytes(size, seed: 4), mode: 0o640)
        guard chown(dir.at("setid"), 0, 0) == 0, chmod(dir.at("setid"), 0o6755) == 0,
              chown(dir.at("grouped"), 0, group) == 0, chmod(dir.at("grouped"), 0o644) == 0 else {
            throw TestFailure("chown")
        }
        let run = try await ringcp(["-p", "setid", "grouped", "out"], in: dir.path, backend: backend,
                                   as: .nobodyInGroup(group))
        #expect(run.status == 0, "\(run)")
        let setid = try lstatOf(dir.at("out/setid"))
        #expect(setid.st_mode & 0o7777 == 0o755, "setid copy: \(String(setid.st_mode & 0o7777, radix: 8))")
        #expect(setid.st_uid == nobodyID)
        let grouped = try lstatOf(dir.at("out/grouped"))
        #expect(grouped.st_gid == group, "the group became \(grouped.st_gid)")
        #expect(grouped.st_mode & 0o7777 == 0o644)
    }

    @Test("a setgid directory copied without -p comes out without its setgid bit, as with cp", arguments: bothBackends)
    func setgidDirectory(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("d"), mode: 0o2755)
        let run = try await ringcp(["-R", "d", "copy"], in: dir.path, backend: backend, umask: 0o022)
        #expect(run.status == 0, "\(run)")
        #expect(try permissions(dir.at("copy")) == 0o755)
        let kept = try await ringcp(["-Rp", "d", "kept"], in: dir.path, backend: backend)
        #expect(kept.status == 0, "\(kept)")
        #expect(try permissions(dir.at("kept")) == 0o2755)
    }
}

/// cp's messages for permission errors behind a symlink (coreutils fail-perm.sh, which must run as non-root).
@Suite("ringcp permission messages")
struct PermissionMessageTests {
    @Test("a symlink into an unsearchable directory: 'cannot stat', and for -t 'target directory', not 'dangling'",
          arguments: bothBackends)
    func behindSymlink(backend: Backend) async throws {
        let dir = try FailureTests.nobodyScratch()
        try makeDirectory(dir.at("D"), mode: 0o777)
        try makeDirectory(dir.at("D/D"), mode: 0o777)
        try makeSymlink(dir.at("symlink"), to: "D/D")
        try writeFile(dir.at("F"), "F")
        chown(dir.path, nobodyID, nobodyID)
        chmod(dir.at("D"), 0)
        defer { chmod(dir.at("D"), 0o700) }
        for arguments in [["F", "symlink"], ["--no-target-directory", "F", "symlink"]] {
            let run = try await ringcp(arguments, in: dir.path, backend: backend, as: .nobody)
            #expect(run.status == 1 && run.errorLines == ["ringcp: cannot stat 'symlink': Permission denied"], "\(run)")
        }
        let run = try await ringcp(["--target-directory=symlink", "F"], in: dir.path, backend: backend, as: .nobody)
        #expect(run.status == 1 && run.errorLines == ["ringcp: target directory 'symlink': Permission denied"], "\(run)")
    }
}
