// The runner's plumbing: clocks, waits with time limits, the copy's write
// window, child processes with their resource usage, and the files.
#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization
import BenchSupport

// MARK: - clock and formatting

func seconds(since start: UInt64) -> Double { Double(now() - start) / 1e9 }

let gib = Double(1 << 30)

/// 1234567 → "1,234,567".
func grouped(_ value: Double) -> String {
    let digits = Array(String(Int(value.rounded())))
    var out = ""
    for (i, c) in digits.enumerated() {
        if i > 0 && (digits.count - i) % 3 == 0 && c != "-" && digits[i - 1] != "-" { out += "," }
        out.append(c)
    }
    return out
}


func progress(_ s: String) {
    var bytes = Array((s + "\n").utf8)
    _ = write(2, &bytes, bytes.count)
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: - waiting for handlers

/// A one-shot signal from a handler to the thread that waits for it, carrying
/// an error message if the work failed.
final class Completion: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let failure = Mutex<String?>(nil)

    func finish(_ error: String? = nil) {
        failure.withLock { $0 = error }
        semaphore.signal()
    }

    /// Waits for `finish`; throws its error, or a timeout naming `what` and
    /// the `state` at that moment (what the handlers had delivered so far).
    func wait(_ what: String, timeout: Double, state: () -> String = { "" }) throws {
        if semaphore.wait(timeout: .now() + timeout) == .timedOut {
            let extra = state()
            throw BenchError("\(what): no completion after \(fixed(timeout, 0)) s" + (extra.isEmpty ? "" : " (\(extra))"))
        }
        if let error = failure.withLock({ $0 }) { throw BenchError("\(what): \(error)") }
    }
}

/// Bytes and calls seen by a handler.
final class Tally: Sendable {
    private let counts = Mutex<(bytes: Int, calls: Int, largest: Int)>((0, 0, 0))

    @discardableResult
    func add(_ bytes: Int) -> (bytes: Int, calls: Int) {
        counts.withLock {
            $0.bytes += bytes
            $0.calls += 1
            $0.largest = max($0.largest, bytes)
            return ($0.bytes, $0.calls)
        }
    }

    var bytes: Int { counts.withLock { $0.bytes } }
    var calls: Int { counts.withLock { $0.calls } }
    var largest: Int { counts.withLock { $0.largest } }
    var summary: String {
        let c = counts.withLock { $0 }
        return "\(c.calls) handler calls, \(c.bytes) bytes, largest delivery \(c.largest) bytes"
    }
}

/// Bytes each of `count` reads delivered so far, counted without a lock or
/// an object per read (what fio's byte count costs it: nothing per read).
// @unchecked: read `i`'s count is touched only by that read's handler calls,
// which never overlap (docs/Semantics.md, "Handlers"), and is read by no
// other thread.
final class ReadCounts: @unchecked Sendable {
    private let counts: UnsafeMutablePointer<Int>

    init(count: Int) {
        counts = .allocate(capacity: max(count, 1))
        counts.initialize(repeating: 0, count: max(count, 1))
    }

    deinit { counts.deallocate() }

    /// Adds `bytes` to read `i`'s count; returns the count before and after.
    @inline(__always)
    func add(_ i: Int, _ bytes: Int) -> (before: Int, after: Int) {
        let before = counts[i]
        counts[i] = before + bytes
        return (before, before + bytes)
    }
}

/// The copy's bound on bytes handed to the write channel and not yet written.
/// The read handler blocks in `acquire` while the window is full; the write
/// handlers `release` what they finished. One thread waits at a time (the read
/// handler, then the thread draining the window after EOF).
final class WriteWindow: Sendable {
    let limit: Int
    private struct State {
        var outstanding = 0
        var writes = 0
        var waiting = false
        var error: String?
    }
    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)

    init(limit: Int) { self.limit = limit }

    func acquire(_ bytes: Int) {
        while true {
            let admitted = state.withLock { s in
                if s.outstanding == 0 || s.outstanding + bytes <= limit {
                    s.outstanding += bytes
                    s.writes += 1
                    return true
                }
                s.waiting = true
                return false
            }
            if admitted { return }
            wake.wait()
        }
    }

    func release(_ bytes: Int, error: String?) {
        let waiter = state.withLock { s in
            s.outstanding -= bytes
            s.writes -= 1
            if let error, s.error == nil { s.error = error }
            defer { s.waiting = false }
            return s.waiting
        }
        if waiter { wake.signal() }
    }

    /// Waits until every acquired write was released; throws the first write error.
    func drain(_ what: String, timeout: Double) throws {
        let deadline = DispatchTime.now() + timeout
        while true {
            let (empty, error, left): (Bool, String?, String) = state.withLock { s in
                if s.outstanding > 0 { s.waiting = true }
                return (s.outstanding == 0, s.error, "\(s.writes) writes, \(s.outstanding) bytes outstanding")
            }
            if let error { throw BenchError("\(what): \(error)") }
            if empty { return }
            if wake.wait(timeout: deadline) == .timedOut {
                throw BenchError("\(what): writes did not finish in \(fixed(timeout, 0)) s (\(left))")
            }
        }
    }
}

private final class ResultBox<T: Sendable>: Sendable {
    let result = Mutex<Result<T, any Error>?>(nil)
}

/// Runs async work to completion from synchronous code.
func blocking<T: Sendable>(_ what: String, timeout: Double, _ body: @escaping @Sendable () async throws -> T) throws -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        box.result.withLock { $0 = result }
        done.signal()
    }
    if done.wait(timeout: .now() + timeout) == .timedOut {
        throw BenchError("\(what): did not finish in \(fixed(timeout, 0)) s")
    }
    return try box.result.withLock { $0! }.get()
}

// MARK: - child processes

struct ChildResult {
    var status: Int32
    var output: String
    var minorFaults: Int
    var seconds: Double
    /// The child's user and system CPU time.
    var cpuSeconds: Double = 0
}

/// The path of this executable, to re-exec it for a child measurement.
let selfPath: String = {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    precondition(n > 0, "cannot read /proc/self/exe")
    return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}()

/// Finds `name` on PATH.
func which(_ name: String) -> String? {
    let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
    for dir in path.split(separator: ":") {
        let candidate = "\(dir)/\(name)"
        if access(candidate, X_OK) == 0 { return candidate }
    }
    return nil
}

/// Spawns `argv` (argv[0] a path), captures its standard output, and reaps it
/// with `wait4` for its resource usage. Kills it after `timeout` seconds.
func spawn(_ argv: [String], timeout: Double) throws -> ChildResult {
    var pipeFds: [Int32] = [-1, -1]
    guard pipe(&pipeFds) == 0 else { throw BenchError("pipe: errno \(errno)") }
    for fd in pipeFds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, pipeFds[1], 1)
    let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
    defer { for p in cArgs { free(p) } }
    var pid: pid_t = 0
    let start = now()
    let rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ)
    close(pipeFds[1])
    guard rc == 0 else {
        close(pipeFds[0])
        throw BenchError("posix_spawn \(argv[0]): errno \(rc)")
    }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    var timedOut = false
    let deadline = start + UInt64(timeout * 1e9)
    while true {
        let t = now()
        let left = deadline > t ? Int32(min(Double(deadline - t) / 1e6, 1e9)) : 0
        var poller = pollfd(fd: pipeFds[0], events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, left)
        if ready == 0 { timedOut = true; break }
        if ready < 0 { if errno == EINTR { continue }; break }
        let n = read(pipeFds[0], &buffer, buffer.count)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        output += buffer[0..<n]
    }
    close(pipeFds[0])
    if timedOut { kill(pid, SIGKILL) }
    var status: Int32 = 0
    var usage = rusage()
    while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
    let elapsed = seconds(since: start)
    if timedOut { throw BenchError("\(argv.joined(separator: " ")): killed after \(fixed(timeout, 0)) s") }
    return ChildResult(status: status, output: String(decoding: output, as: UTF8.self),
                       minorFaults: usage.ru_minflt, seconds: elapsed,
                       cpuSeconds: Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
                           + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6)
}

extension ChildResult {
    var exitedCleanly: Bool { status == 0 }
    var statusDescription: String { describeWaitStatus(status) }
}

func describeWaitStatus(_ status: Int32) -> String {
    status & 0x7f == 0 ? "exit status \((status >> 8) & 0xff)" : "killed by signal \(status & 0x7f)"
}

/// This process's peak resident set (VmHWM), KiB. Unlike rusage's ru_maxrss,
/// it starts afresh at exec: the kernel's maxrss of a child started with
/// posix_spawn (vfork) also counts the parent's peak.
func peakResidentKiB() -> Int {
    guard let status = fopen("/proc/self/status", "r") else { return -1 }
    defer { fclose(status) }
    var line: UnsafeMutablePointer<CChar>? = nil
    var capacity = 0
    defer { free(line) }
    while getline(&line, &capacity, status) > 0 {
        let text = String(cString: line!)
        if text.hasPrefix("VmHWM:") {
            return Int(text.dropFirst(6).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "") ?? -1
        }
    }
    return -1
}

/// Runs `argv` in a forked child and reaps it with wait4: a child forked
/// from this small process starts with a small resident set, so its
/// ru_maxrss is close to its own peak (within what the fork copied).
func forkExec(_ argv: [String]) throws -> (seconds: Double, status: Int32, usage: rusage) {
    let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
    defer { for p in cArgs { free(p) } }
    let start = now()
    let pid = fork()
    if pid == 0 {
        execv(cArgs[0]!, cArgs)
        _exit(127)
    }
    guard pid > 0 else { throw BenchError("fork: errno \(errno)") }
    var status: Int32 = 0
    var usage = rusage()
    while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
    return (seconds(since: start), status, usage)
}

/// "key=value key=value" lines → values.
func keyValues(_ text: String) -> [String: Double] {
    var values: [String: Double] = [:]
    for word in text.split(whereSeparator: { $0 == " " || $0 == "\n" }) {
        let parts = word.split(separator: "=", maxSplits: 1)
        if parts.count == 2, let value = Double(parts[1]) { values[String(parts[0])] = value }
    }
    return values
}
