import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One case run twice, on the same starting tree: by ringcp and by GNU cp.
struct CpCase: CustomStringConvertible, Sendable {
    let name: String
    let arguments: [String]
    var environment: [String: String] = [:]
    /// Makes the starting tree in a scratch directory (its path given).
    let setup: @Sendable (String) throws -> Void

    var description: String { name }
}

/// What GNU cp did: its exit status and stderr (waited for without holding a cooperative thread).
func runGNUcp(_ arguments: [String], in directory: String, environment: [String: String]) async throws -> (Int32, String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/cp")
    process.arguments = arguments
    process.currentDirectoryURL = URL(fileURLWithPath: directory)
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
    let errPath = "/tmp/ringcp-test-gnu-stderr-\(UUID().uuidString)"
    _ = FileManager.default.createFile(atPath: errPath, contents: nil)
    defer { unlink(errPath) }
    process.standardError = FileHandle(forWritingAtPath: errPath)
    process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
    try process.run()
    while process.isRunning { try await Task.sleep(for: .milliseconds(2)) }
    process.waitUntilExit()
    return (process.terminationStatus, (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "")
}

/// ringcp with extra environment variables (given to the child only).
func ringcp(_ arguments: [String], in directory: String, backend: Backend, environment: [String: String]) async throws -> Run {
    let run = try await Child(arguments, in: directory, backend: backend, environment: environment).finished()
    if run.hung { throw TestFailure("\(run)\ndid not finish within a minute") }
    return run
}

/// ringcp against GNU cp on cp's tricky cases (coreutils' tests/cp and the
/// issue's reproductions): the same exit status, the same messages (but
/// for the program's name), the same tree after.
@Suite("ringcp against GNU cp", .serialized)
struct CompatTests {
    static let cases: [CpCase] = [
        CpCase(name: "-R symlink/ copies the directory it names (symlink-slash.sh)", arguments: ["-R", "symlink/", "s"]) { d in
            try makeDirectory(d + "/dir")
            try writeFile(d + "/dir/f", "f")
            try makeSymlink(d + "/symlink", to: "dir")
        },
        CpCase(name: "-f onto a symlink to itself replaces the link (thru-dangling.sh)", arguments: ["-f", "f", "loop"]) { d in
            try writeFile(d + "/f", "hi\n")
            try makeSymlink(d + "/loop", to: "loop")
        },
        CpCase(name: "onto a dangling symlink: refused", arguments: ["f", "dangle"]) { d in
            try writeFile(d + "/f", "hi\n")
            try makeSymlink(d + "/dangle", to: "no-such")
        },
        CpCase(name: "POSIXLY_CORRECT: through a dangling symlink", arguments: ["f", "dangle"],
               environment: ["POSIXLY_CORRECT": "1"]) { d in
            try writeFile(d + "/f", "hi\n")
            try makeSymlink(d + "/dangle", to: "no-such")
        },
        CpCase(name: "-rn where a directory stands for a file: skipped silently", arguments: ["-rn", "src/.", "dst"]) { d in
            for dir in ["src", "dst", "dst/x"] { try makeDirectory(d + "/" + dir) }
            try writeFile(d + "/src/x", "file")
            try writeFile(d + "/src/y", "y")
        },
        CpCase(name: "-a: symlinks, modes, nested directories", arguments: ["-a", "src", "dst"]) { d in
            try makeDirectory(d + "/src", mode: 0o750)
            try makeDirectory(d + "/src/sub", mode: 0o700)
            try writeFile(d + "/src/sub/f", "f", mode: 0o604)
            try makeSymlink(d + "/src/link", to: "sub/f")
            try makeSymlink(d + "/src/dangling", to: "nowhere")
        },
        CpCase(name: "-d keeps a symlink operand a symlink", arguments: ["-d", "link", "copy"]) { d in
            try writeFile(d + "/f", "f")
            try makeSymlink(d + "/link", to: "f")
        },
        CpCase(name: "-H follows operands only, -R keeps inner links", arguments: ["-RH", "top", "out"]) { d in
            try makeDirectory(d + "/dir")
            try writeFile(d + "/dir/f", "f")
            try makeSymlink(d + "/dir/inner", to: "f")
            try makeSymlink(d + "/top", to: "dir")
        },
        CpCase(name: "-RL through a symlink to a directory that contains it: cp's cyclic line, the rest copied",
               arguments: ["-RL", "t", "out"]) { d in
            try makeDirectory(d + "/t")
            try makeDirectory(d + "/t/sub")
            try writeFile(d + "/t/sub/f", "f")
            try makeSymlink(d + "/t/sub/back", to: "..")
        },
        CpCase(name: "-L follows every link", arguments: ["-RL", "top", "out"]) { d in
            try makeDirectory(d + "/dir")
            try writeFile(d + "/dir/f", "f")
            try makeSymlink(d + "/dir/inner", to: "f")
            try makeSymlink(d + "/top", to: "dir")
        },
        CpCase(name: "--preserve=mode", arguments: ["--preserve=mode", "f", "g"]) { d in
            try writeFile(d + "/f", "f", mode: 0o751)
        },
        CpCase(name: "--no-preserve=mode: the default mode", arguments: ["--no-preserve=mode", "f", "g"]) { d in
            try writeFile(d + "/f", "f", mode: 0o600)
        },
        CpCase(name: "--no-preserve=mode --preserve=all: the later wins", arguments: ["--no-preserve=mode", "--preserve=all", "f", "g"]) { d in
            try writeFile(d + "/f", "f", mode: 0o600)
        },
        CpCase(name: "--backup=numbered", arguments: ["--backup=numbered", "f", "g"]) { d in
            try writeFile(d + "/f", "new")
            try writeFile(d + "/g", "old")
            try writeFile(d + "/g.~1~", "older")
        },
        CpCase(name: "-b -S .bak", arguments: ["-b", "-S", ".bak", "f", "g"]) { d in
            try writeFile(d + "/f", "new")
            try writeFile(d + "/g", "old")
        },
        CpCase(name: "--backup with -f onto itself backs the file up", arguments: ["-f", "--backup=simple", "f", "f"]) { d in
            try writeFile(d + "/f", "data")
        },
        CpCase(name: "-d onto the file its symlink names: refused, not a loop (same-file.sh)", arguments: ["-d", "symlink", "foo"]) { d in
            try writeFile(d + "/foo", "data")
            try makeSymlink(d + "/symlink", to: "foo")
        },
        CpCase(name: "-sf onto the source itself: refused, not a loop (same-file.sh)", arguments: ["-sf", "foo", "foo"]) { d in
            try writeFile(d + "/foo", "data")
        },
        CpCase(name: "--link follows a symlink operand (link-deref.sh)", arguments: ["--link", "filelink", "dst"]) { d in
            try writeFile(d + "/file", "data")
            try makeSymlink(d + "/filelink", to: "file")
        },
        CpCase(name: "-s with an absolute source", arguments: ["-s", "/etc/hostname", "link"]) { _ in },
        CpCase(name: "--attributes-only keeps an existing file's data", arguments: ["--attributes-only", "f", "g"]) { d in
            try writeFile(d + "/f", "1")
            try writeFile(d + "/g", "2")
        },
        CpCase(name: "--attributes-only makes an empty file", arguments: ["--attributes-only", "-p", "f", "g"]) { d in
            try writeFile(d + "/f", "data", mode: 0o640)
        },
        CpCase(name: "--parents", arguments: ["--parents", "a/b/f", "out"]) { d in
            for dir in ["a", "a/b", "out"] { try makeDirectory(d + "/" + dir) }
            try writeFile(d + "/a/b/f", "f")
        },
        CpCase(name: "-u skips a newer destination, replaces an older one", arguments: ["-u", "new", "old", "dir"]) { d in
            try makeDirectory(d + "/dir")
            try writeFile(d + "/new", "new source")
            try writeFile(d + "/old", "old source")
            try writeFile(d + "/dir/new", "older copy")
            try writeFile(d + "/dir/old", "newer copy")
            try setModificationTime(d + "/new", seconds: 2_000_000_000, nanoseconds: 0)
            try setModificationTime(d + "/dir/new", seconds: 1_000_000_000, nanoseconds: 0)
            try setModificationTime(d + "/old", seconds: 1_000_000_000, nanoseconds: 0)
            try setModificationTime(d + "/dir/old", seconds: 2_000_000_000, nanoseconds: 0)
        },
        CpCase(name: "--remove-destination replaces a symlink, not its target", arguments: ["--remove-destination", "f", "link"]) { d in
            try writeFile(d + "/f", "new")
            try writeFile(d + "/target", "keep")
            try makeSymlink(d + "/link", to: "target")
        },
        CpCase(name: "--sparse=never and --reflink=auto copy the bytes", arguments: ["--sparse=never", "--reflink=auto", "f", "g"]) { d in
            try writeFile(d + "/f", randomBytes(600_000, seed: 8))
        },
        CpCase(name: "-T onto a symlink to a directory: refused", arguments: ["-RT", "src", "dlink"]) { d in
            for dir in ["src", "real"] { try makeDirectory(d + "/" + dir) }
            try writeFile(d + "/src/f", "f")
            try makeSymlink(d + "/dlink", to: "real")
        },
    ]

    @Test("the same status, messages and tree as GNU cp", arguments: bothBackends, cases)
    func sameAsCp(backend: Backend, scenario: CpCase) async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/cp"),
              (try? runTool("/usr/bin/cp", ["--version"]))?.contains("GNU coreutils") == true else {
            try Test.cancel("GNU cp is not at /usr/bin/cp, skipping")
        }
        let ours = Scratch(), theirs = Scratch()
        try scenario.setup(ours.path)
        try scenario.setup(theirs.path)
        let run = try await ringcp(scenario.arguments, in: ours.path, backend: backend, environment: scenario.environment)
        let (status, stderr) = try await runGNUcp(scenario.arguments, in: theirs.path, environment: scenario.environment)
        #expect(run.status == status, "\(run)\nGNU cp: exit \(status), \(stderr.debugDescription)")
        let messages = run.errorLines.map { $0.replacingOccurrences(of: "ringcp: ", with: "cp: ") }
        #expect(messages == lines(stderr).map { $0.replacingOccurrences(of: "/usr/bin/cp: ", with: "cp: ") }, "\(run)")
        let diff = differences(try snapshot(ours.path), try snapshot(theirs.path))
        #expect(diff.isEmpty, "ringcp vs GNU cp:\n\(diff.joined(separator: "\n"))")
    }

    /// Newer than the GNU cp here (9.1): checked against cp's manual.
    @Test("--update=none keeps the destination; -i answered no fails; --keep-directory-symlink follows a symlink to a directory",
          arguments: bothBackends)
    func newerFlags(backend: Backend) async throws {
        let dir = Scratch()
        try writeFile(dir.at("f"), "new")
        try writeFile(dir.at("g"), "old")
        let none = try await ringcp(["--update=none", "f", "g"], in: dir.path, backend: backend)
        #expect(none.status == 0 && none.stderr.isEmpty, "\(none)")
        #expect(try textOf(dir.at("g")) == "old")
        let fail = try await ringcp(["--update=none-fail", "f", "g"], in: dir.path, backend: backend)
        #expect(fail.status == 1, "\(fail)")
        #expect(try textOf(dir.at("g")) == "old")
        // cp 9.2 and later: -i answered no (here: end of input) fails, silently but for the question.
        let asked = try await ringcp(["-i", "f", "g"], in: dir.path, backend: backend)
        #expect(asked.status == 1 && asked.errorLines == ["ringcp: overwrite 'g'? "], "\(asked)")
        #expect(try textOf(dir.at("g")) == "old")
        for name in ["src", "real"] { try makeDirectory(dir.at(name)) }
        try writeFile(dir.at("src/f"), "f")
        try makeSymlink(dir.at("dlink"), to: "real")
        let keep = try await ringcp(["-RT", "--keep-directory-symlink", "src", "dlink"], in: dir.path, backend: backend)
        #expect(keep.status == 0, "\(keep)")
        #expect(try textOf(dir.at("real/f")) == "f")
        #expect(try lstatOf(dir.at("dlink")).st_mode & S_IFMT == S_IFLNK)
    }

    @Test("-a and -l keep hard links; -l makes them", arguments: bothBackends)
    func hardLinks(backend: Backend) async throws {
        let dir = Scratch()
        try makeDirectory(dir.at("src"))
        try writeFile(dir.at("src/a"), "a")
        #expect(link(dir.at("src/a"), dir.at("src/b")) == 0)
        let archive = try await ringcp(["-a", "src", "dst"], in: dir.path, backend: backend)
        #expect(archive.status == 0, "\(archive)")
        #expect(try lstatOf(dir.at("dst/a")).st_ino == lstatOf(dir.at("dst/b")).st_ino)
        let linked = try await ringcp(["-l", "src/a", "hard"], in: dir.path, backend: backend)
        #expect(linked.status == 0, "\(linked)")
        #expect(try lstatOf(dir.at("hard")).st_ino == lstatOf(dir.at("src/a")).st_ino)
    }

    @Test("-p copies POSIX ACLs; --preserve=xattr (and -a) the other extended attributes", arguments: bothBackends)
    func extendedAttributes(backend: Backend) async throws {
        let dir = Scratch()
        try writeFile(dir.at("f"), "f", mode: 0o640)
        // An access ACL: user::rw-, user:1234:r--, group::r--, mask::r--, other::---.
        var acl: [UInt8] = [2, 0, 0, 0]
        for (tag, perm, id) in [(1, 6, UInt32.max), (2, 4, 1234), (4, 4, UInt32.max), (0x10, 4, UInt32.max), (0x20, 0, UInt32.max)] {
            acl += [UInt8(tag), 0, UInt8(perm), 0] + withUnsafeBytes(of: UInt32(id).littleEndian, Array.init)
        }
        guard Xattr.set(dir.at("f"), "system.posix_acl_access", acl),
              Xattr.set(dir.at("f"), "user.note", Array("hello".utf8)) else {
            try Test.cancel("this file system takes no ACLs or user xattrs, skipping")
        }
        let plain = try await ringcp(["-p", "f", "p"], in: dir.path, backend: backend)
        #expect(plain.status == 0, "\(plain)")
        #expect(Xattr.get(dir.at("p"), "system.posix_acl_access") == Xattr.get(dir.at("f"), "system.posix_acl_access"))
        #expect(Xattr.get(dir.at("p"), "user.note") == nil, "-p alone copies no xattr")
        let all = try await ringcp(["--preserve=xattr", "f", "x"], in: dir.path, backend: backend)
        #expect(all.status == 0, "\(all)")
        #expect(Xattr.get(dir.at("x"), "user.note") == Array("hello".utf8))
    }

    @Test("a source named by bytes that are not UTF-8 is found and copied", arguments: bothBackends)
    func nonUTF8Operand(backend: Backend) async throws {
        let dir = Scratch()
        let name: [UInt8] = [0x66, 0xFF, 0x67]  // "f\xffg"
        let path = Array((dir.path + "/").utf8) + name + [0]
        let created = path.withUnsafeBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { creat($0.baseAddress!, 0o644) }
        }
        guard created >= 0 else { throw TestFailure("creat") }
        _ = write(created, "payload", 7)
        close(created)
        // The shell passes the raw bytes on (Process would repair them).
        let child = try Child(["-c", "exec \"$0\" \"$(printf 'f\\377g')\" copy", ringcpPath], in: dir.path,
                              backend: backend, shell: true)
        let run = try await child.finished()
        #expect(run.status == 0, "\(run)")
        #expect(try textOf(dir.at("copy")) == "payload")
    }
}

/// Extended attributes, through the C library (not in the Glibc module).
enum Xattr {
    private typealias Get = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int
    private typealias Set = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeRawPointer?, Int, Int32) -> Int32

    static func set(_ path: String, _ name: String, _ value: [UInt8]) -> Bool {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "setxattr") else { return false }
        let function = unsafeBitCast(symbol, to: Set.self)
        return value.withUnsafeBytes { function(path, name, $0.baseAddress, $0.count, 0) } == 0
    }

    static func get(_ path: String, _ name: String) -> [UInt8]? {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "getxattr") else { return nil }
        let function = unsafeBitCast(symbol, to: Get.self)
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { function(path, name, $0.baseAddress, $0.count) }
        return n < 0 ? nil : Array(buffer[0..<n])
    }
}
