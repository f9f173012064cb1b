import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Existing destinations: -n, atomic replacement, --in-place, and the same file refused.
@Suite("ringcp over existing files")
struct OverwriteTests {
    @Test("-n leaves an existing file untouched (contents, inode, mtime), small and large", arguments: bothBackends)
    func noClobber(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("d"))
        var names: [String] = []
        for (name, size) in pathSizes {
            try writeFile(dir.at(name), randomBytes(size, seed: 21))
            try writeFile(dir.at("d/" + name), "keep me")
            try setModificationTime(dir.at("d/" + name), seconds: 1_000_000_000, nanoseconds: 7)
            names.append(name)
        }
        try writeFile(dir.at("new"), "new file")
        let before = try names.map { try lstatOf(dir.at("d/" + $0)) }
        for arguments in [["-n"], ["--no-clobber"], ["-n", "-f"]] {
            let run = try await ringcp(arguments + names + ["new", "d"], in: dir.path, backend: backend)
            #expect(run.status == 0, "\(run)")
            #expect(run.stderr.isEmpty, "\(run)")
            for (name, old) in zip(names, before) {
                let now = try lstatOf(dir.at("d/" + name))
                #expect(try textOf(dir.at("d/" + name)) == "keep me", "\(arguments) \(name)")
                #expect(now.st_ino == old.st_ino && now.st_mtim.tv_sec == old.st_mtim.tv_sec
                        && now.st_mtim.tv_nsec == old.st_mtim.tv_nsec, "\(arguments) \(name)")
            }
            // -n still copies what is not there.
            #expect(try textOf(dir.at("d/new")) == "new file")
            #expect(leftovers(in: dir.at("d")).isEmpty)
        }
    }

    @Test("overwriting replaces the file atomically: new contents under a new inode; old links keep the old bytes",
          arguments: bothBackends)
    func atomicReplace(backend: Backend) async throws {
        let dir = Scratch()
        for (name, size) in pathSizes {
            let contents = randomBytes(size, seed: 22)
            try writeFile(dir.at(name), contents)
            try writeFile(dir.at(name + "-dst"), randomBytes(size * 2, seed: 23))
            let oldBytes = try readFile(dir.at(name + "-dst"))
            guard link(dir.at(name + "-dst"), dir.at(name + "-oldlink")) == 0 else { throw TestFailure("link") }
            let old = try lstatOf(dir.at(name + "-dst"))
            let run = try await ringcp([name, name + "-dst"], in: dir.path, backend: backend)
            #expect(run.status == 0, "\(run)")
            let new = try lstatOf(dir.at(name + "-dst"))
            #expect(new.st_ino != old.st_ino, "\(name): the file was written in place")
            #expect(try readFile(dir.at(name + "-dst")) == contents, "\(name)")
            #expect(try readFile(dir.at(name + "-oldlink")) == oldBytes, "\(name): the old inode changed")
        }
        #expect(leftovers(in: dir.path).isEmpty, "\(leftovers(in: dir.path))")
    }

    @Test("overwriting keeps the existing file's owner and group, as cp does (as root)", arguments: bothBackends)
    func replaceKeepsOwner(backend: Backend) async throws {
        guard getuid() == 0 else { try Test.cancel("not root: cannot give files away, skipping") }
        let dir = Scratch()
        var owners: [String: (uid_t, gid_t)] = [:]
        for (name, size) in pathSizes {
            try writeFile(dir.at(name), randomBytes(size, seed: 30))
            try writeFile(dir.at(name + "-dst"), "old", mode: 0o640)
            guard chown(dir.at(name + "-dst"), nobodyID, nobodyID) == 0 else { throw TestFailure("chown") }
            let run = try await ringcp([name, name + "-dst"], in: dir.path, backend: backend)
            #expect(run.status == 0, "\(run)")
            #expect(try readFile(dir.at(name + "-dst")) == readFile(dir.at(name)))
            #expect(try permissions(dir.at(name + "-dst")) == 0o640)
            let s = try lstatOf(dir.at(name + "-dst"))
            owners[name] = (s.st_uid, s.st_gid)
        }
        // The atomic replace makes a new inode; it is given the old one's owner.
        for (name, owner) in owners {
            #expect(owner == (nobodyID, nobodyID), "\(name): now \(owner.0):\(owner.1)")
        }
    }

    @Test("--in-place writes into the existing inode, truncating a longer file", arguments: bothBackends)
    func inPlace(backend: Backend) async throws {
        let dir = Scratch()
        for (name, size) in pathSizes {
            let contents = randomBytes(size, seed: 24)
            try writeFile(dir.at(name), contents)
            try writeFile(dir.at(name + "-dst"), randomBytes(size * 2 + 10, seed: 25))
            guard link(dir.at(name + "-dst"), dir.at(name + "-otherlink")) == 0 else { throw TestFailure("link") }
            let old = try lstatOf(dir.at(name + "-dst"))
            let run = try await ringcp(["--in-place", name, name + "-dst"], in: dir.path, backend: backend)
            #expect(run.status == 0, "\(run)")
            let new = try lstatOf(dir.at(name + "-dst"))
            #expect(new.st_ino == old.st_ino, "\(name): --in-place made a new inode")
            #expect(try readFile(dir.at(name + "-dst")) == contents, "\(name)")
            #expect(try readFile(dir.at(name + "-otherlink")) == contents, "\(name): the hard link sees the new bytes")
        }
        #expect(leftovers(in: dir.path).isEmpty)
    }

    @Test("a copy through a symlink destination replaces the link's target and keeps the link", arguments: bothBackends)
    func throughSymlink(backend: Backend) async throws {
        let dir = Scratch()
        for (name, size) in pathSizes {
            let contents = randomBytes(size, seed: 26)
            try writeFile(dir.at(name), contents)
            try writeFile(dir.at(name + "-target"), "old")
            try makeSymlink(dir.at(name + "-link"), to: name + "-target")
            let run = try await ringcp([name, name + "-link"], in: dir.path, backend: backend)
            #expect(run.status == 0, "\(run)")
            #expect(try lstatOf(dir.at(name + "-link")).st_mode & S_IFMT == S_IFLNK)
            #expect(try readFile(dir.at(name + "-target")) == contents)
        }
        // A dangling symlink is not written through (cp's refusal).
        try makeSymlink(dir.at("dangling"), to: "missing-target")
        let run = try await ringcp(["small", "dangling"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: not writing through dangling symlink 'dangling'"], "\(run)")
        #expect(!exists(dir.at("missing-target")))
    }

    @Test("the same file is refused: by name, through a symlink, through a hard link, into its own directory",
          arguments: bothBackends)
    func sameFile(backend: Backend) async throws {
        let dir = Scratch()
        let contents = randomBytes(5000, seed: 27)
        try writeFile(dir.at("f"), contents)
        try makeSymlink(dir.at("soft"), to: "f")
        guard link(dir.at("f"), dir.at("hard")) == 0 else { throw TestFailure("link") }
        try makeDirectory(dir.at("d"))
        try writeFile(dir.at("d/g"), contents)
        let big = randomBytes((1 << 20) + 5, seed: 28)
        try writeFile(dir.at("big"), big)
        let cases: [(arguments: [String], message: String)] = [
            (["f", "f"], "'f' and 'f' are the same file"),
            (["f", "soft"], "'f' and 'soft' are the same file"),
            (["soft", "f"], "'soft' and 'f' are the same file"),
            (["f", "hard"], "'f' and 'hard' are the same file"),
            (["d/g", "d"], "'d/g' and 'd/g' are the same file"),
            (["big", "./big"], "'big' and './big' are the same file"),
            (["--in-place", "f", "hard"], "'f' and 'hard' are the same file"),
        ]
        for (arguments, message) in cases {
            let run = try await ringcp(arguments, in: dir.path, backend: backend)
            #expect(run.status == 1, "\(run)")
            #expect(run.errorLines == ["ringcp: " + message], "\(run)")
        }
        #expect(try readFile(dir.at("f")) == contents)
        #expect(try readFile(dir.at("d/g")) == contents)
        #expect(try readFile(dir.at("big")) == big)
        #expect(try lstatOf(dir.at("soft")).st_mode & S_IFMT == S_IFLNK)
        #expect(leftovers(in: dir.path).isEmpty && leftovers(in: dir.at("d")).isEmpty)
    }

    @Test("two names of one file: --backup and --remove-destination copy onto a hard link, -bd backs up a symlink, -dl onto the file a symlink names does nothing (cp's same_file_ok)",
          arguments: bothBackends)
    func sameFileAllowed(backend: Backend) async throws {
        for size in [5000, (1 << 20) + 5] {
            let contents = randomBytes(size, seed: 31)
            for option in ["-b", "--remove-destination", "-bf"] {
                let dir = Scratch()
                try writeFile(dir.at("foo"), contents)
                guard link(dir.at("foo"), dir.at("hardlink")) == 0 else { throw TestFailure("link") }
                let run = try await ringcp([option, "foo", "hardlink"], in: dir.path, backend: backend)
                #expect(run.status == 0 && run.errorLines.isEmpty, "\(option): \(run)")
                #expect(try readFile(dir.at("foo")) == contents)
                #expect(try readFile(dir.at("hardlink")) == contents)
                let (a, b) = (try lstatOf(dir.at("foo")), try lstatOf(dir.at("hardlink")))
                #expect(a.st_ino != b.st_ino, "\(option): a new file")
                #expect(exists(dir.at("hardlink~")) == (option != "--remove-destination"), "\(option)")
            }
        }
        // Through a symlink the source is the link: still refused (the backup would leave it dangling).
        let dir = Scratch()
        try writeFile(dir.at("foo"), "XYZ")
        try makeSymlink(dir.at("symlink"), to: "foo")
        for option in ["-b", "--remove-destination"] {
            let run = try await ringcp([option, "symlink", "foo"], in: dir.path, backend: backend)
            #expect(run.status == 1 && run.errorLines == ["ringcp: 'symlink' and 'foo' are the same file"], "\(run)")
        }
        // -dl symlink foo: foo is what the link names already; nothing done, exit 0.
        let linked = try await ringcp(["-dl", "symlink", "foo"], in: dir.path, backend: backend)
        #expect(linked.status == 0 && linked.errorLines.isEmpty, "\(linked)")
        // -bd sl1 sl2 (two symlinks to foo): sl2 backed up, then a copy of sl1.
        try makeSymlink(dir.at("sl1"), to: "foo")
        try makeSymlink(dir.at("sl2"), to: "foo")
        let backedUp = try await ringcp(["-bd", "sl1", "sl2"], in: dir.path, backend: backend)
        #expect(backedUp.status == 0, "\(backedUp)")
        #expect(try lstatOf(dir.at("sl2~")).st_mode & S_IFMT == S_IFLNK)
        #expect(try lstatOf(dir.at("sl2")).st_mode & S_IFMT == S_IFLNK)
        #expect(try textOf(dir.at("foo")) == "XYZ")
        #expect(leftovers(in: dir.path).isEmpty)
    }

    @Test("a missing source: one line naming it, the other sources still copied, exit 1", arguments: bothBackends)
    func missingSource(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("d"))
        try writeFile(dir.at("a"), "a")
        try writeFile(dir.at("b"), randomBytes((1 << 20) + 1, seed: 29))
        let run = try await ringcp(["a", "no-such-file", "b", "d"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: cannot stat 'no-such-file': No such file or directory"], "\(run)")
        #expect(try textOf(dir.at("d/a")) == "a")
        #expect(try readFile(dir.at("d/b")) == readFile(dir.at("b")))
        #expect(!exists(dir.at("d/no-such-file")))
    }
}
