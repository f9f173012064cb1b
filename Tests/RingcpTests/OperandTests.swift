import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The operand forms: SOURCE DEST, SOURCE... DIRECTORY, -T, -t, `--`.
@Suite("ringcp operands")
struct OperandTests {
    @Test("a single file to a new name", arguments: bothBackends)
    func singleFile(backend: Backend) async throws {
        let dir = Scratch()
        let contents = randomBytes(10_000, seed: 1)
        try writeFile(dir.at("a"), contents)
        let run = try await ringcp(["a", "b"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout.isEmpty && run.stderr.isEmpty, "\(run)")
        #expect(try readFile(dir.at("b")) == contents)
        #expect(try readFile(dir.at("a")) == contents)
        #expect(leftovers(in: dir.path).isEmpty)
    }

    @Test("a file into a directory, by relative and absolute paths", arguments: bothBackends)
    func fileIntoDirectory(backend: Backend) async throws {
        let dir = Scratch()
        let contents = randomBytes(4097, seed: 2)
        try makeDirectory(dir.at("src"))
        try makeDirectory(dir.at("into"))
        try writeFile(dir.at("src/f.bin"), contents)
        var run = try await ringcp(["src/f.bin", "into"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try readFile(dir.at("into/f.bin")) == contents)
        // Absolute paths, a trailing slash on the directory, run from elsewhere.
        try makeDirectory(dir.at("other"))
        run = try await ringcp([dir.at("src/f.bin"), dir.at("other") + "/"], in: "/", backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try readFile(dir.at("other/f.bin")) == contents)
    }

    @Test("several sources into a directory, -v naming each", arguments: bothBackends)
    func severalIntoDirectory(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("d"))
        let names = ["one", "two", "three", "big"]
        var contents: [String: [UInt8]] = [:]
        for (i, name) in names.enumerated() {
            contents[name] = randomBytes(name == "big" ? (1 << 20) + 3 : 100 * (i + 1), seed: UInt64(10 + i))
            try writeFile(dir.at(name), contents[name]!)
        }
        let run = try await ringcp(["-v"] + names + ["d"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(run.stderr.isEmpty, "\(run)")
        for name in names {
            #expect(try readFile(dir.at("d/" + name)) == contents[name]!)
            #expect(run.outputLines.contains("'\(name)' -> 'd/\(name)'"), "\(run)")
        }
        #expect(run.outputLines.count == names.count, "\(run)")
    }

    @Test("several sources into something that is not a directory: refused, nothing copied")
    func severalIntoFile() async throws {
        let dir = Scratch()
        try writeFile(dir.at("a"), "a")
        try writeFile(dir.at("b"), "b")
        try writeFile(dir.at("c"), "old")
        let run = try await ringcp(["a", "b", "c"], in: dir.path)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines.first == "ringcp: target 'c' is not a directory", "\(run)")
        #expect(try textOf(dir.at("c")) == "old")
    }

    @Test("-T: the destination directory is the copy itself, not its parent", arguments: bothBackends)
    func noTargetDirectory(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("src"))
        try writeFile(dir.at("src/x"), "x")
        try makeDirectory(dir.at("dst"))
        var run = try await ringcp(["-T", "-r", "src", "dst"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try textOf(dir.at("dst/x")) == "x")
        #expect(!exists(dir.at("dst/src")))

        // A file onto a directory with -T: cp's refusal.
        try writeFile(dir.at("f"), "f")
        run = try await ringcp(["-T", "f", "dst"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: cannot overwrite directory 'dst' with non-directory"], "\(run)")
        #expect(!exists(dir.at("dst/f")))

        // -T takes exactly one source.
        run = try await ringcp(["-T", "f", "src/x", "dst"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines.first == "ringcp: extra operand 'src/x'", "\(run)")
    }

    @Test("-t DIR: every source goes into DIR", arguments: bothBackends)
    func targetDirectory(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("t"))
        try writeFile(dir.at("a"), "alpha")
        try writeFile(dir.at("b"), "beta")
        var run = try await ringcp(["-t", "t", "a", "b"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try textOf(dir.at("t/a")) == "alpha")
        #expect(try textOf(dir.at("t/b")) == "beta")

        run = try await ringcp(["--target-directory=t", "a"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")

        // -t with something that is not a directory.
        run = try await ringcp(["-t", "a", "b"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(try textOf(dir.at("a")) == "alpha")
        // -t and -T together.
        run = try await ringcp(["-T", "-t", "t", "a"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.stderr.contains("cannot combine"), "\(run)")
    }

    @Test("`--` ends the options: a source named like an option", arguments: bothBackends)
    func doubleDash(backend: Backend) async throws {
        let dir = Scratch()
        try writeFile(dir.at("-odd-name.txt"), "odd")
        try writeFile(dir.at("-n"), "dash n")
        var run = try await ringcp(["--", "-odd-name.txt", "copy.txt"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try textOf(dir.at("copy.txt")) == "odd")

        // `-n` after `--` is a file, not no-clobber: it overwrites.
        run = try await ringcp(["--", "-n", "copy.txt"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(try textOf(dir.at("copy.txt")) == "dash n")

        // Without `--`, the name is taken for an option and refused; nothing is made.
        run = try await ringcp(["-odd-name.txt", "other.txt"], in: dir.path, backend: backend)
        #expect(run.status != 0, "\(run)")
        #expect(!exists(dir.at("other.txt")))
    }

    @Test("a destination with a trailing slash that does not exist: refused, as cp does, nothing made",
          arguments: bothBackends, ["small", "large"])
    func trailingSlashOnMissingDirectory(backend: Backend, path: String) async throws {
        let dir = Scratch()
        try writeFile(dir.at("f"), randomBytes(path == "small" ? 100 : (1 << 20) + 1, seed: 12))
        let run = try await ringcp(["f", "missing/"], in: dir.path, backend: backend)
        // cp: "cannot create regular file 'missing/': Not a directory", exit 1.
        #expect(run.status == 1, "\(run)")
        #expect(!exists(dir.at("missing")), "ringcp made 'missing'")
        #expect(run.errorLines.count == 1 && run.stderr.contains("'missing/'"), "\(run)")
    }

    @Test("a file whose stat says 0 bytes but reads more (/proc): copied whole, as cp does", arguments: bothBackends)
    func procFile(backend: Backend) async throws {
        let dir = Scratch()
        let expected = try textOf("/proc/version")
        guard !expected.isEmpty, try lstatOf("/proc/version").st_size == 0 else {
            try Test.cancel("/proc/version is not a zero-size file with contents here, skipping")
        }
        let run = try await ringcp(["/proc/version", "version"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        let copied = try textOf(dir.at("version"))
        // Its stat says 0 bytes: IO.copyFile reads to find out.
        #expect(copied == expected, "copied \(copied.utf8.count) of \(expected.utf8.count) bytes")
    }

    @Test("missing operands: a usage error")
    func missingOperands() async throws {
        let dir = Scratch()
        try writeFile(dir.at("a"), "a")
        var run = try await ringcp([], in: dir.path)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines.first == "ringcp: missing file operand", "\(run)")
        run = try await ringcp(["a"], in: dir.path)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines.first == "ringcp: missing destination file operand after 'a'", "\(run)")
    }

    @Test("--help shows examples")
    func help() async throws {
        let dir = Scratch()
        let run = try await ringcp(["--help"], in: dir.path)
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout.contains("Examples:"), "\(run)")
        #expect(run.stdout.contains("--in-place"), "\(run)")
    }

    @Test("--version names ringcp and exits 0, as cp --version does")
    func version() async throws {
        let dir = Scratch()
        let run = try await ringcp(["--version"], in: dir.path)
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout.hasPrefix("ringcp (RingIO) "), "\(run)")
        #expect(run.errorLines.isEmpty, "\(run)")
    }
}
