import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The file sizes that take each copy path: small (one linked chain) and large (two channels).
let pathSizes: [(name: String, size: Int)] = [("small", 3000), ("large", (3 << 20) + 1)]

/// Modes and times: -p keeps them; without -p cp's rules for new and existing files.
@Suite("ringcp modes and times")
struct AttributeTests {
    static let mtime = (seconds: 1_234_567_890, nanoseconds: 123_456_789)

    @Test("-p keeps odd modes and mtime to the nanosecond, on small and large files", arguments: bothBackends)
    func preserveFiles(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("out"))
        let modes: [mode_t] = [0o751, 0o600, 0o444, 0o705, 0o1755]
        var names: [String] = []
        for (name, size) in pathSizes {
            for mode in modes {
                let file = "\(name)-\(String(mode, radix: 8))"
                try writeFile(dir.at(file), randomBytes(size, seed: UInt64(mode)), mode: mode)
                try setModificationTime(dir.at(file), seconds: Self.mtime.seconds, nanoseconds: Self.mtime.nanoseconds)
                names.append(file)
            }
        }
        // A destination that exists already takes the source's mode and time too.
        try writeFile(dir.at("out/large-751"), "old", mode: 0o666)
        try writeFile(dir.at("out/small-751"), "old", mode: 0o666)
        let run = try await ringcp(["-p"] + names + ["out"], in: dir.path, backend: backend, umask: 0o077)
        #expect(run.status == 0, "\(run)")
        for name in names {
            let source = try lstatOf(dir.at(name))
            let copy = try lstatOf(dir.at("out/" + name))
            #expect(copy.st_mode == source.st_mode, "\(name): \(String(copy.st_mode, radix: 8))")
            #expect(copy.st_mtim.tv_sec == source.st_mtim.tv_sec && copy.st_mtim.tv_nsec == source.st_mtim.tv_nsec,
                    "\(name): mtime \(copy.st_mtim) vs \(source.st_mtim)")
            // The atime as it was before the copy read the source (setModificationTime's).
            #expect(copy.st_atim.tv_sec == Self.mtime.seconds - 1000 && copy.st_atim.tv_nsec == 5,
                    "\(name): atime \(copy.st_atim)")
            #expect(try readFile(dir.at("out/" + name)) == readFile(dir.at(name)))
        }
    }

    @Test("-rp keeps directories' modes and mtimes (set after their contents), and symlinks' mtimes",
          arguments: bothBackends)
    func preserveTree(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("src"), mode: 0o751)
        try makeDirectory(dir.at("src/locked"), mode: 0o500)  // no write bit: filled in before its mode is set
        try writeFile(dir.at("src/locked/f"), "f", mode: 0o640)
        try makeSymlink(dir.at("src/link"), to: "locked/f")
        try setModificationTime(dir.at("src/locked/f"), seconds: 1_000_000_000, nanoseconds: 1)
        try setModificationTime(dir.at("src/link"), seconds: 1_100_000_000, nanoseconds: 999_999_999,
                                followingSymlinks: false)
        try setModificationTime(dir.at("src/locked"), seconds: 1_200_000_000, nanoseconds: 42)
        try setModificationTime(dir.at("src"), seconds: 1_300_000_000, nanoseconds: 500_000_000)
        let run = try await ringcp(["-rp", "src", "dst"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        for path in ["", "/locked", "/locked/f", "/link"] {
            let source = try lstatOf(dir.at("src" + path))
            let copy = try lstatOf(dir.at("dst" + path))
            #expect(copy.st_mode == source.st_mode, "\(path): \(String(copy.st_mode, radix: 8))")
            #expect(copy.st_mtim.tv_sec == source.st_mtim.tv_sec && copy.st_mtim.tv_nsec == source.st_mtim.tv_nsec,
                    "'\(path)': mtime \(copy.st_mtim) vs \(source.st_mtim)")
        }
    }

    @Test("-p keeps the owner and group (as root); without -p the copy is the copier's", arguments: bothBackends)
    func preserveOwner(backend: Backend) async throws {
        guard getuid() == 0 else { try Test.cancel("not root: cannot give files away, skipping") }
        let dir = Scratch()
        for (name, size) in pathSizes {
            try writeFile(dir.at(name), randomBytes(size, seed: 13))
            guard chown(dir.at(name), nobodyID, nobodyID) == 0 else { throw TestFailure("chown") }
        }
        try makeDirectory(dir.at("tree"))
        try makeSymlink(dir.at("tree/link"), to: "nowhere")
        guard lchown(dir.at("tree/link"), nobodyID, nobodyID) == 0, chown(dir.at("tree"), nobodyID, nobodyID) == 0 else {
            throw TestFailure("lchown")
        }
        try makeDirectory(dir.at("p"))
        try makeDirectory(dir.at("plain"))
        var result = try await ringcp(["-p", "small", "large", "p"], in: dir.path, backend: backend)
        #expect(result.status == 0, "\(result)")
        result = try await ringcp(["-rp", "tree", "p"], in: dir.path, backend: backend)
        #expect(result.status == 0, "\(result)")
        result = try await ringcp(["small", "large", "plain"], in: dir.path, backend: backend)
        #expect(result.status == 0, "\(result)")
        for path in ["p/small", "p/large", "p/tree", "p/tree/link"] {
            let s = try lstatOf(dir.at(path))
            #expect(s.st_uid == nobodyID && s.st_gid == nobodyID, "\(path): \(s.st_uid):\(s.st_gid)")
        }
        for path in ["plain/small", "plain/large"] {
            #expect(try lstatOf(dir.at(path)).st_uid == getuid(), "\(path)")
        }
    }

    @Test("without -p a new file gets the source's mode less the umask, and a new mtime", arguments: bothBackends)
    func newFileMode(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("out"))
        var expected: [String: mode_t] = [:]
        var names: [String] = []
        for (name, size) in pathSizes {
            for mode: mode_t in [0o751, 0o666, 0o777, 0o640] {
                let file = "\(name)-\(String(mode, radix: 8))"
                try writeFile(dir.at(file), randomBytes(size, seed: UInt64(mode)), mode: mode)
                try setModificationTime(dir.at(file), seconds: Self.mtime.seconds, nanoseconds: Self.mtime.nanoseconds)
                expected[file] = mode & ~0o027
                names.append(file)
            }
        }
        let run = try await ringcp(names + ["out"], in: dir.path, backend: backend, umask: 0o027)
        #expect(run.status == 0, "\(run)")
        for name in names {
            let copy = try lstatOf(dir.at("out/" + name))
            #expect(copy.st_mode & 0o7777 == expected[name]!, "\(name): \(String(copy.st_mode & 0o7777, radix: 8))")
            #expect(copy.st_mtim.tv_sec != Self.mtime.seconds, "\(name) got the source's mtime without -p")
        }
    }

    @Test("without -p the umask does not widen a mode: umask 0 gives the source's mode exactly", arguments: bothBackends)
    func umaskZero(backend: Backend) async throws {
        let dir = Scratch()
        for (name, size) in pathSizes {
            try writeFile(dir.at(name), randomBytes(size, seed: 1), mode: 0o667)
        }
        for (name, _) in pathSizes {
            let copy = try await ringcp([name, name + "-copy"], in: dir.path, backend: backend, umask: 0)
            #expect(copy.status == 0, "\(copy)")
            #expect(try permissions(dir.at(name + "-copy")) == 0o667)
        }
    }

    @Test("without -p an existing destination keeps its own mode (and inode with --in-place)", arguments: bothBackends)
    func existingKeepsMode(backend: Backend) async throws {
        let dir = Scratch()
        for (name, size) in pathSizes {
            try writeFile(dir.at(name), randomBytes(size, seed: 11), mode: 0o755)
            try writeFile(dir.at(name + "-dst"), "old", mode: 0o604)
            try writeFile(dir.at(name + "-inplace"), "old", mode: 0o604)
            var run = try await ringcp([name, name + "-dst"], in: dir.path, backend: backend, umask: 0o022)
            #expect(run.status == 0, "\(run)")
            #expect(try permissions(dir.at(name + "-dst")) == 0o604, "\(name)")
            #expect(try readFile(dir.at(name + "-dst")) == readFile(dir.at(name)))
            run = try await ringcp(["--in-place", name, name + "-inplace"], in: dir.path, backend: backend, umask: 0o022)
            #expect(run.status == 0, "\(run)")
            #expect(try permissions(dir.at(name + "-inplace")) == 0o604, "\(name) --in-place")
            #expect(try readFile(dir.at(name + "-inplace")) == readFile(dir.at(name)))
        }
    }
}
