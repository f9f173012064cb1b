import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Destinations that cannot be written: permissions, a read-only mount, a full file system.
@Suite("ringcp failures")
struct FailureTests {
    /// A scratch directory that `nobody` can reach, for the permission cases
    /// (root bypasses permission checks, so they run as nobody through
    /// setpriv); cancels the test where that is impossible.
    static func nobodyScratch() throws -> Scratch {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else {
            try Test.cancel("setpriv is missing: cannot run ringcp as an unprivileged user, skipping")
        }
        guard getuid() == 0 else {
            try Test.cancel("not root: cannot switch to nobody for the permission cases, skipping")
        }
        let dir = Scratch()
        chmod(dir.path, 0o755)
        // The binary must be reachable by nobody.
        guard (try? runTool("/usr/bin/setpriv", [
            "--reuid=\(nobodyID)", "--regid=\(nobodyID)", "--clear-groups", "--", "/usr/bin/test", "-x", ringcpPath,
        ])) != nil else {
            try Test.cancel("nobody cannot run \(ringcpPath), skipping")
        }
        return dir
    }

    @Test("an unwritable destination directory (0o555, run as nobody): one line per file, exit 1, nothing made",
          arguments: bothBackends)
    func unwritableDirectory(backend: Backend) async throws {
        let dir = try Self.nobodyScratch()
        try makeDirectory(dir.at("locked"), mode: 0o555)
        chown(dir.at("locked"), nobodyID, nobodyID)
        for (name, size) in pathSizes { try writeFile(dir.at(name), randomBytes(size, seed: 31)) }
        let run = try await ringcp(["small", "large", "locked"], in: dir.path, backend: backend, as: .nobody)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines.sorted() == [
            "ringcp: cannot create regular file 'locked/large': Permission denied",
            "ringcp: cannot create regular file 'locked/small': Permission denied",
        ], "\(run)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.at("locked")).isEmpty)
    }

    @Test("an existing file that nobody may write: refused without -f (file untouched), replaced with -f",
          arguments: bothBackends)
    func readOnlyFileAndForce(backend: Backend) async throws {
        let dir = try Self.nobodyScratch()
        try makeDirectory(dir.at("d"), mode: 0o755)
        chown(dir.at("d"), nobodyID, nobodyID)
        for (name, size) in pathSizes {
            try writeFile(dir.at(name), randomBytes(size, seed: 32))
            try writeFile(dir.at("d/" + name), "read only", mode: 0o444)
            chown(dir.at("d/" + name), nobodyID, nobodyID)
        }
        var run = try await ringcp(["small", "large", "d"], in: dir.path, backend: backend, as: .nobody)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines.sorted() == [
            "ringcp: cannot create regular file 'd/large': Permission denied",
            "ringcp: cannot create regular file 'd/small': Permission denied",
        ], "\(run)")
        for (name, _) in pathSizes { #expect(try textOf(dir.at("d/" + name)) == "read only") }

        run = try await ringcp(["-f", "small", "large", "d"], in: dir.path, backend: backend, as: .nobody)
        #expect(run.status == 0, "\(run)")
        for (name, _) in pathSizes {
            #expect(try readFile(dir.at("d/" + name)) == readFile(dir.at(name)), "\(name)")
            #expect(try permissions(dir.at("d/" + name)) == 0o444, "\(name) kept its mode")
        }
        #expect(leftovers(in: dir.at("d")).isEmpty)
    }

    @Test("a writable file in a directory that nobody may write: replaced in place with --in-place",
          arguments: bothBackends)
    func writableFileInLockedDirectory(backend: Backend) async throws {
        let dir = try Self.nobodyScratch()
        try makeDirectory(dir.at("d"), mode: 0o555)
        chown(dir.at("d"), nobodyID, nobodyID)
        for (name, size) in pathSizes {
            try writeFile(dir.at(name), randomBytes(size, seed: 33))
            try writeFile(dir.at("d/" + name), "old", mode: 0o644)
            chown(dir.at("d/" + name), nobodyID, nobodyID)
        }
        let run = try await ringcp(["--in-place", "small", "large", "d"], in: dir.path, backend: backend, as: .nobody)
        #expect(run.status == 0, "\(run)")
        for (name, _) in pathSizes { #expect(try readFile(dir.at("d/" + name)) == readFile(dir.at(name)), "\(name)") }
    }

    @Test("a file in a directory that nobody may write, the file itself writable: replaced, as cp does",
          arguments: bothBackends)
    func writableFileInLockedDirectoryAtomic(backend: Backend) async throws {
        let dir = try Self.nobodyScratch()
        try makeDirectory(dir.at("d"), mode: 0o555)
        chown(dir.at("d"), nobodyID, nobodyID)
        try writeFile(dir.at("src"), "new")
        try writeFile(dir.at("d/src"), "old", mode: 0o644)
        chown(dir.at("d/src"), nobodyID, nobodyID)
        // cp opens the file and writes it; it never needs to create anything in d.
        _ = try runTool("/usr/bin/setpriv", ["--reuid=\(nobodyID)", "--regid=\(nobodyID)", "--clear-groups", "--",
                                            "/usr/bin/cp", "src", "d/src"], in: dir.path)
        #expect(try textOf(dir.at("d/src")) == "new", "cp itself could not replace it")
        try writeFile(dir.at("d/src"), "old", mode: 0o644)
        let run = try await ringcp(["src", "d"], in: dir.path, backend: backend, as: .nobody)
        // The atomic replace needs a temporary file in d, which nobody may
        // create: ringcp then writes in place, as cp does.
        let contents = try textOf(dir.at("d/src"))
        #expect(run.status == 0, "\(run)")
        #expect(contents == "new")
        #expect(leftovers(in: dir.at("d")).isEmpty)
    }

    @Test("a source nobody may read: one line, cp's wording, naming it once; the others still copied",
          arguments: bothBackends)
    func unreadableSource(backend: Backend) async throws {
        let dir = try Self.nobodyScratch()
        try makeDirectory(dir.at("out"))
        chown(dir.at("out"), nobodyID, nobodyID)
        for (name, size) in pathSizes { try writeFile(dir.at(name), randomBytes(size, seed: 51), mode: 0o600) }
        try writeFile(dir.at("readable"), "readable")
        let run = try await ringcp(["small", "large", "readable", "out"], in: dir.path, backend: backend, as: .nobody)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines.count == 2, "\(run)")
        for (name, _) in pathSizes {
            #expect(run.errorLines.contains { $0.hasPrefix("ringcp: cannot open '\(name)'") && $0.hasSuffix(": Permission denied") },
                    "\(run)")
            #expect(!exists(dir.at("out/" + name)))
        }
        #expect(try textOf(dir.at("out/readable")) == "readable")
        #expect(run.errorLines.contains("ringcp: cannot open 'small' for reading: Permission denied"), "\(run)")
        #expect(!run.stderr.contains("''"), "\(run)")
    }

    @Test("-r with a directory nobody may read in the middle of the tree: cp's line naming it, the rest copied, exit 1",
          arguments: bothBackends)
    func unreadableDirectoryInTree(backend: Backend) async throws {
        let dir = try Self.nobodyScratch()
        try makeDirectory(dir.at("tree"))
        try makeDirectory(dir.at("tree/locked"))
        try makeDirectory(dir.at("tree/z"))
        try writeFile(dir.at("tree/a"), "a")
        try writeFile(dir.at("tree/locked/x"), "x")
        try writeFile(dir.at("tree/z/y"), "y")
        chmod(dir.at("tree/locked"), 0)
        try makeDirectory(dir.at("dest"))
        chown(dir.at("dest"), nobodyID, nobodyID)
        let run = try await ringcp(["-r", "tree", "dest/out"], in: dir.path, backend: backend, as: .nobody)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: cannot access 'tree/locked': Permission denied"], "\(run)")
        #expect(try textOf(dir.at("dest/out/a")) == "a")
        #expect(try textOf(dir.at("dest/out/z/y")) == "y")
        // As GNU cp: the directory is made before it is read, and keeps the source's mode.
        var status = stat()
        #expect(lstat(dir.at("dest/out/locked"), &status) == 0 && status.st_mode & 0o7777 == 0, "\(run)")
        #expect(!exists(dir.at("dest/out/locked/x")))
        chmod(dir.at("tree/locked"), 0o755)
        chmod(dir.at("dest/out/locked"), 0o755)
    }

    @Test("-r with files nobody may read among 40 in a directory the run makes: cp's line for each, the others copied, exit 1",
          arguments: bothBackends)
    func unreadableFilesInNewDirectory(backend: Backend) async throws {
        let dir = try Self.nobodyScratch()
        try makeDirectory(dir.at("tree"))
        try makeDirectory(dir.at("tree/d"))
        for index in 0..<40 { try writeFile(dir.at("tree/d/f\(index)"), "file \(index)") }
        // Files of the same directory, copied together (a batch): two fail, in its middle and at its end.
        for locked in [7, 39] { chmod(dir.at("tree/d/f\(locked)"), 0o200) }
        try makeDirectory(dir.at("dest"))
        chown(dir.at("dest"), nobodyID, nobodyID)
        let run = try await ringcp(["-r", "tree", "dest/out"], in: dir.path, backend: backend, as: .nobody)
        #expect(run.status == 1, "\(run)")
        #expect(Set(run.errorLines) == [
            "ringcp: cannot open 'tree/d/f7' for reading: Permission denied",
            "ringcp: cannot open 'tree/d/f39' for reading: Permission denied",
        ], "\(run)")
        #expect(run.errorLines.count == 2, "\(run)")
        for index in 0..<40 where index != 7 && index != 39 {
            #expect(try textOf(dir.at("dest/out/d/f\(index)")) == "file \(index)")
        }
        #expect(!exists(dir.at("dest/out/d/f7")) && !exists(dir.at("dest/out/d/f39")))
    }

    @Test("a read-only mount: one line per file naming it, exit 1, the old files intact", arguments: bothBackends)
    func readOnlyMount(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("backing"))
        try writeFile(dir.at("backing/small"), "old small")
        try writeFile(dir.at("backing/large"), "old large")
        try makeDirectory(dir.at("ro"))
        guard mount(dir.at("backing"), dir.at("ro"), nil, UInt(MS_BIND), nil) == 0 else {
            try Test.cancel("cannot bind-mount here (\(String(cString: strerror(errno)))), skipping")
        }
        dir.mounted(dir.at("ro"))
        guard mount(nil, dir.at("ro"), nil, UInt(MS_REMOUNT | MS_BIND | MS_RDONLY), nil) == 0 else {
            try Test.cancel("cannot remount read-only here (\(String(cString: strerror(errno)))), skipping")
        }
        for (name, size) in pathSizes { try writeFile(dir.at(name), randomBytes(size, seed: 34)) }
        try writeFile(dir.at("new"), "new")
        let run = try await ringcp(["small", "large", "new", "ro"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines.count == 3, "\(run)")
        for name in ["small", "large", "new"] {
            #expect(run.errorLines.contains { $0.hasPrefix("ringcp: ") && $0.contains("'ro/\(name)'")
                        && $0.hasSuffix(": Read-only file system") }, "\(name): \(run)")
        }
        #expect(try textOf(dir.at("ro/small")) == "old small")
        #expect(try textOf(dir.at("ro/large")) == "old large")
        #expect(!exists(dir.at("ro/new")))
    }

    /// A 1 MiB tmpfs mounted in `dir`; cancels the test where mounting is refused.
    static func smallFilesystem(in dir: Scratch) throws -> String {
        let mountPoint = dir.at("small-fs")
        try makeDirectory(mountPoint)
        guard mount("tmpfs", mountPoint, "tmpfs", 0, "size=1m") == 0 else {
            try Test.cancel("cannot mount a tmpfs here (\(String(cString: strerror(errno)))), skipping")
        }
        dir.mounted(mountPoint)
        return mountPoint
    }

    @Test("ENOSPC over an existing file: exit 1, one line, the old destination intact, no temporary file",
          arguments: bothBackends, ["small", "large"])
    func noSpace(backend: Backend, path: String) async throws {
        let dir = Scratch()
        let full = try Self.smallFilesystem(in: dir)
        // 1 MiB in all: the old destination and a filler leave ~100 KiB free.
        let old = randomBytes(64 << 10, seed: 35)
        try writeFile(full + "/dst", old)
        try writeFile(full + "/filler", randomBytes(860 << 10, seed: 36))
        let size = path == "small" ? 200 << 10 : (3 << 20) + 1
        try writeFile(dir.at("src"), randomBytes(size, seed: 37))
        let run = try await ringcp(["src", full + "/dst"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: error writing '\(full)/dst': No space left on device"], "\(run)")
        #expect(try readFile(full + "/dst") == old, "the old destination changed")
        #expect(leftovers(in: full).isEmpty, "left behind: \(leftovers(in: full))")
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: full)) == ["dst", "filler"])
    }

    @Test("ENOSPC on a new file: exit 1, one line, nothing left behind", arguments: bothBackends, ["small", "large"])
    func noSpaceNewFile(backend: Backend, path: String) async throws {
        let dir = Scratch()
        let full = try Self.smallFilesystem(in: dir)
        try writeFile(full + "/filler", randomBytes(900 << 10, seed: 38))
        let size = path == "small" ? 200 << 10 : (3 << 20) + 1
        try writeFile(dir.at("src"), randomBytes(size, seed: 39))
        let run = try await ringcp(["src", full], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: error writing '\(full)/src': No space left on device"], "\(run)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: full) == ["filler"])
    }
}
