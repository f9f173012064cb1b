import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - running the binary

/// The engine backend the ringcp child runs on.
enum Backend: String, CaseIterable, CustomStringConvertible, Sendable {
    case ioUring = "io_uring"
    case threadPool = "threadpool"

    var description: String { rawValue }
}

/// Both backends, for the parameterized cases.
let bothBackends = Backend.allCases

/// Who runs the child: this process's user, or `nobody` through setpriv
/// (for the permission checks that root bypasses).
enum RunAs: Sendable {
    case current
    case nobody
    /// `nobody`, also in this supplementary group.
    case nobodyInGroup(gid_t)
}

let nobodyID: uid_t = 65534

/// What one run of ringcp did.
struct Run: CustomStringConvertible {
    let arguments: [String]
    /// The exit status, or 128 + the signal's number when a signal ended it.
    let status: Int32
    let signaled: Bool
    /// It did not finish in time and was killed.
    var hung = false
    let stdout: String
    let stderr: String

    /// stderr's lines (without the final empty one).
    var errorLines: [String] { lines(stderr) }
    var outputLines: [String] { lines(stdout) }

    var description: String {
        "ringcp \(arguments.joined(separator: " ")) -> \(hung ? "hung, killed" : signaled ? "signal" : "exit") \(status)\n"
            + "stdout: \(stdout.debugDescription)\nstderr: \(stderr.debugDescription)"
    }
}

func lines(_ text: String) -> [String] {
    var parts = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    if parts.last == "" { parts.removeLast() }
    return parts
}

/// The ringcp binary, built beside the test executable (`.build/debug`).
let ringcpPath: String = {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
    var dir = (exe as NSString).deletingLastPathComponent
    // The test bundle may sit inside a directory of its own (…/X.xctest/…).
    while !dir.isEmpty && dir != "/" {
        let candidate = dir + "/ringcp"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        dir = (dir as NSString).deletingLastPathComponent
    }
    return ""
}()

/// A started ringcp child, for the tests that signal it mid-copy.
final class Child {
    let process = Process()
    let arguments: [String]
    let backend: Backend
    private let outPath: String
    private let errPath: String

    /// - Parameter terminal: run it on a pseudo-terminal (through script(1)),
    ///   whose output comes back as stdout.
    /// - Parameter shell: `arguments` are /bin/sh's (a script that runs
    ///   ringcp, given as `$0`), not ringcp's.
    init(_ arguments: [String], in directory: String, backend: Backend, umask: mode_t? = nil,
         as user: RunAs = .current, terminal: Bool = false, shell: Bool = false,
         environment extra: [String: String] = [:]) throws {
        guard !ringcpPath.isEmpty else {
            throw TestFailure("the ringcp binary is not beside the test executable; build with `swift build --build-tests`")
        }
        self.arguments = arguments
        self.backend = backend
        var environment = ProcessInfo.processInfo.environment.merging(extra) { $1 }
        switch backend {
        case .ioUring:
            // No RINGIO_QUIET: the fallback line, if any, tells the run it was not on io_uring.
            environment["RINGIO_BACKEND"] = nil
            environment["RINGIO_QUIET"] = nil
        case .threadPool:
            environment["RINGIO_BACKEND"] = "threadpool"
            environment["RINGIO_QUIET"] = "1"
        }
        var executable = shell ? "/bin/sh" : ringcpPath
        var argv = arguments
        if let umask {
            argv = ["-c", "umask \(String(umask, radix: 8)) && exec \"$0\" \"$@\"", executable] + argv
            executable = "/bin/sh"
        }
        if terminal {
            let command = ([executable] + argv).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
            argv = ["-qec", command.joined(separator: " "), "/dev/null"]
            executable = "/usr/bin/script"
        }
        switch user {
        case .current:
            break
        case .nobody:
            argv = ["--reuid=\(nobodyID)", "--regid=\(nobodyID)", "--clear-groups", "--", executable] + argv
            executable = "/usr/bin/setpriv"
        case .nobodyInGroup(let group):
            argv = ["--reuid=\(nobodyID)", "--regid=\(nobodyID)", "--groups=\(group)", "--", executable] + argv
            executable = "/usr/bin/setpriv"
        }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = argv
        process.environment = environment
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        // Output into files: no pipe to fill up, whatever the child prints.
        outPath = "/tmp/ringcp-test-stdout-\(UUID().uuidString)"
        errPath = "/tmp/ringcp-test-stderr-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        process.standardOutput = FileHandle(forWritingAtPath: outPath)
        process.standardError = FileHandle(forWritingAtPath: errPath)
        try process.run()
    }

    var isRunning: Bool { process.isRunning }

    /// Sends SIGINT.
    func interrupt() { process.interrupt() }

    /// Waits for the child (killing it after `timeout`, and saying so in
    /// `Run.hung`) and collects what it did.
    func finished(timeout: Double = 60) async throws -> Run {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(2)) }
        return try collect()
    }

    private func collect() throws -> Run {
        let hung = process.isRunning
        if hung { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        let out = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
        var err = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
        unlink(outPath)
        unlink(errPath)
        let signaled = process.terminationReason == .uncaughtSignal
        let status = signaled ? 128 + process.terminationStatus : process.terminationStatus
        if backend == .ioUring {
            let fallback = "RingIO: using the thread-pool backend"
            if err.contains(fallback) {
                let reason = lines(err).first { $0.hasPrefix(fallback) } ?? ""
                try Test.cancel("io_uring is unavailable to the ringcp child, skipping the io_uring case: \(reason)")
            }
            err = lines(err).filter { !$0.hasPrefix(fallback) }.map { $0 + "\n" }.joined()
        }
        return Run(arguments: arguments, status: status, signaled: signaled, hung: hung, stdout: out, stderr: err)
    }
}

/// Runs ringcp with `arguments` in `directory` and waits for it (without
/// holding one of the few threads the tests share).
@discardableResult
func ringcp(_ arguments: [String], in directory: String, backend: Backend = .ioUring, umask: mode_t? = nil,
            as user: RunAs = .current, terminal: Bool = false) async throws -> Run {
    let run = try await Child(arguments, in: directory, backend: backend, umask: umask, as: user,
                              terminal: terminal).finished()
    if run.hung { throw TestFailure("\(run)\ndid not finish within a minute") }
    return run
}

/// Runs another program (cp, sha256sum) and returns its stdout; fails on a non-zero exit.
func runTool(_ path: String, _ arguments: [String], in directory: String? = nil) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let out = Pipe()
    process.standardOutput = out
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw TestFailure("\(path) \(arguments) exited with \(process.terminationStatus)")
    }
    return String(decoding: data, as: UTF8.self)
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: - files

/// A fresh directory under /tmp, removed (with anything mounted in it) at deinit.
final class Scratch {
    let path: String
    private var mounts: [String] = []

    init() {
        var template = Array("/tmp/ringcp-test-XXXXXX".utf8CString)
        let p = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(p != nil, "mkdtemp failed")
        path = String(cString: p!)
    }

    deinit {
        for mountPoint in mounts.reversed() { umount2(mountPoint, Int32(MNT_DETACH)) }
        try? FileManager.default.removeItem(atPath: path)
    }

    func at(_ name: String) -> String { path + "/" + name }

    /// Unmounted at deinit, before the directory goes.
    func mounted(_ mountPoint: String) { mounts.append(mountPoint) }
}

/// Deterministic bytes: xorshift from `seed`.
func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var x = seed &* 0x9E37_79B9_7F4A_7C15 | 1
    var out = [UInt8](repeating: 0, count: (count + 7) & ~7)
    out.withUnsafeMutableBytes { raw in
        let words = raw.baseAddress!.assumingMemoryBound(to: UInt64.self)
        for i in 0..<(raw.count / 8) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            words[i] = x
        }
    }
    out.removeLast(out.count - count)
    return out
}

func writeFile(_ path: String, _ contents: [UInt8], mode: mode_t = 0o644) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
    guard fd >= 0 else { throw TestFailure("open \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var offset = 0
    while offset < contents.count {
        let n = contents.withUnsafeBytes { pwrite(fd, $0.baseAddress! + offset, $0.count - offset, off_t(offset)) }
        guard n > 0 else { throw TestFailure("write \(path): \(String(cString: strerror(errno)))") }
        offset += n
    }
    guard fchmod(fd, mode) == 0 else { throw TestFailure("fchmod \(path)") }
}

func writeFile(_ path: String, _ text: String, mode: mode_t = 0o644) throws {
    try writeFile(path, Array(text.utf8), mode: mode)
}

func readFile(_ path: String) throws -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: path) else { throw TestFailure("cannot read \(path)") }
    return [UInt8](data)
}

func textOf(_ path: String) throws -> String { String(decoding: try readFile(path), as: UTF8.self) }

func lstatOf(_ path: String) throws -> stat {
    var s = stat()
    guard lstat(path, &s) == 0 else { throw TestFailure("lstat \(path): \(String(cString: strerror(errno)))") }
    return s
}

func exists(_ path: String) -> Bool {
    var s = stat()
    return lstat(path, &s) == 0
}

func makeDirectory(_ path: String, mode: mode_t = 0o755) throws {
    guard mkdir(path, mode) == 0, chmod(path, mode) == 0 else {
        throw TestFailure("mkdir \(path): \(String(cString: strerror(errno)))")
    }
}

func makeSymlink(_ path: String, to target: String) throws {
    guard symlink(target, path) == 0 else { throw TestFailure("symlink \(path): \(String(cString: strerror(errno)))") }
}

func setModificationTime(_ path: String, seconds: Int, nanoseconds: Int, followingSymlinks: Bool = true) throws {
    var times = [timespec(tv_sec: seconds - 1000, tv_nsec: 5), timespec(tv_sec: seconds, tv_nsec: nanoseconds)]
    guard utimensat(AT_FDCWD, path, &times, followingSymlinks ? 0 : AT_SYMLINK_NOFOLLOW) == 0 else {
        throw TestFailure("utimensat \(path): \(String(cString: strerror(errno)))")
    }
}

/// The temporary files ringcp and IO.copyFile leave behind if they fail to clean up (`.name.ringio-*`).
func leftovers(in directory: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
        .filter { $0.contains(".ringio-") || $0.contains(".ringcp-tmp") }
}

func permissions(_ path: String) throws -> mode_t { try lstatOf(path).st_mode & 0o7777 }

// MARK: - SHA-256

/// FIPS 180-4 SHA-256, for checking copies byte for byte. Written with
/// pointers: the tests run unoptimized, where array subscripts are calls.
enum SHA256 {
    private static let k: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]

    static func hex(_ message: [UInt8]) -> String {
        digest(message).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    static func digest(_ message: [UInt8]) -> [UInt8] {
        var tail = Array(message[(message.count - message.count % 64)...])
        tail.append(0x80)
        while tail.count % 64 != 56 { tail.append(0) }
        let bits = UInt64(message.count) &* 8
        for shift in stride(from: 56, through: 0, by: -8) { tail.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        let h = UnsafeMutablePointer<UInt32>.allocate(capacity: 8)
        let w = UnsafeMutablePointer<UInt32>.allocate(capacity: 64)
        let kk = UnsafeMutablePointer<UInt32>.allocate(capacity: 64)
        defer { h.deallocate(); w.deallocate(); kk.deallocate() }
        for (i, v) in [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
                       0x5be0cd19].enumerated() { h[i] = UInt32(v) }
        for i in 0..<64 { kk[i] = k[i] }
        message.withUnsafeBytes { raw in
            let whole = raw.count - raw.count % 64
            if whole > 0 { compress(raw.baseAddress!.assumingMemoryBound(to: UInt8.self), whole / 64, h, w, kk) }
        }
        tail.withUnsafeBytes { raw in
            compress(raw.baseAddress!.assumingMemoryBound(to: UInt8.self), raw.count / 64, h, w, kk)
        }
        var out: [UInt8] = []
        for i in 0..<8 {
            for shift: UInt32 in [24, 16, 8, 0] { out.append(UInt8(truncatingIfNeeded: h[i] >> shift)) }
        }
        return out
    }

    /// `blocks` 64-byte blocks from `p` into the state `h`.
    private static func compress(_ p: UnsafePointer<UInt8>, _ blocks: Int, _ h: UnsafeMutablePointer<UInt32>,
                                 _ w: UnsafeMutablePointer<UInt32>, _ k: UnsafeMutablePointer<UInt32>) {
        var block = p
        for _ in 0..<blocks {
            var t = 0
            while t < 16 {
                w[t] = UInt32(block[4 &* t]) << 24 | UInt32(block[4 &* t &+ 1]) << 16
                    | UInt32(block[4 &* t &+ 2]) << 8 | UInt32(block[4 &* t &+ 3])
                t &+= 1
            }
            while t < 64 {
                let x = w[t &- 15], y = w[t &- 2]
                let s0 = (x >> 7 | x << 25) ^ (x >> 18 | x << 14) ^ (x >> 3)
                let s1 = (y >> 17 | y << 15) ^ (y >> 19 | y << 13) ^ (y >> 10)
                w[t] = w[t &- 16] &+ s0 &+ w[t &- 7] &+ s1
                t &+= 1
            }
            var a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7]
            t = 0
            while t < 64 {
                let s1 = (e >> 6 | e << 26) ^ (e >> 11 | e << 21) ^ (e >> 25 | e << 7)
                let ch = (e & f) ^ (~e & g)
                let t1 = hh &+ s1 &+ ch &+ k[t] &+ w[t]
                let s0 = (a >> 2 | a << 30) ^ (a >> 13 | a << 19) ^ (a >> 22 | a << 10)
                let maj = (a & b) ^ (a & c) ^ (b & c)
                hh = g; g = f; f = e; e = d &+ t1
                d = c; c = b; b = a; a = t1 &+ s0 &+ maj
                t &+= 1
            }
            h[0] &+= a; h[1] &+= b; h[2] &+= c; h[3] &+= d
            h[4] &+= e; h[5] &+= f; h[6] &+= g; h[7] &+= hh
            block += 64
        }
    }
}
// MARK: - diff -r

/// One entry of a tree, as `diff -r` (plus modes) sees it.
struct Entry: Equatable, CustomStringConvertible {
    enum Kind: String { case file, directory, symlink, fifo, other }
    let kind: Kind
    let permissions: mode_t
    /// A file's bytes.
    var bytes: [UInt8] = []
    /// A symlink's target.
    var target = ""

    var description: String {
        switch kind {
        case .file: "file \(String(permissions, radix: 8)), \(bytes.count) bytes, SHA-256 \(SHA256.hex(bytes))"
        case .symlink: "symlink -> \(target)"
        default: "\(kind) \(String(permissions, radix: 8))"
        }
    }
}

/// Every path under `root` (relative; `root` itself is ""), without following symlinks.
func snapshot(_ root: String) throws -> [String: Entry] {
    var result: [String: Entry] = [:]
    func visit(_ relative: String) throws {
        let path = relative.isEmpty ? root : root + "/" + relative
        let s = try lstatOf(path)
        let perms = s.st_mode & 0o7777
        switch s.st_mode & S_IFMT {
        case S_IFREG:
            result[relative] = Entry(kind: .file, permissions: perms, bytes: try readFile(path))
        case S_IFLNK:
            let target = try FileManager.default.destinationOfSymbolicLink(atPath: path)
            result[relative] = Entry(kind: .symlink, permissions: 0, target: target)
        case S_IFIFO:
            result[relative] = Entry(kind: .fifo, permissions: perms)
        case S_IFDIR:
            result[relative] = Entry(kind: .directory, permissions: perms)
            for name in try FileManager.default.contentsOfDirectory(atPath: path).sorted() {
                try visit(relative.isEmpty ? name : relative + "/" + name)
            }
        default:
            result[relative] = Entry(kind: .other, permissions: perms)
        }
    }
    try visit("")
    return result
}

/// The differences between two trees, one line each (empty: the same).
func differences(_ a: [String: Entry], _ b: [String: Entry]) -> [String] {
    var out: [String] = []
    for path in Set(a.keys).union(b.keys).sorted() {
        switch (a[path], b[path]) {
        case let (x?, y?) where x != y: out.append("'\(path)': \(x) vs \(y)")
        case (_?, nil): out.append("only in the first: '\(path)'")
        case (nil, _?): out.append("only in the second: '\(path)'")
        default: break
        }
    }
    return out
}
