#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOEngine
@testable import RingIOBase

/// The backends for parameterized tests: both, unless the environment
/// variable `RINGIO_TEST_BACKENDS` names one (`iouring` or `threadpool`).
///
/// A case whose engine is made for an explicit backend does not depend on
/// `RINGIO_BACKEND` (which picks the shared engine's), so scripts/test, which
/// runs this target once with the shared engine on io_uring and once with
/// `RINGIO_BACKEND=threadpool`, used to run each such case twice. It now
/// names io_uring for its first run and the thread pool for its second: each
/// case runs once, beside a shared engine on the same backend. A plain
/// `swift test` and the sanitizer runs set nothing and run both.
let allBackends: [IOEngine.Backend] = {
    let both: [IOEngine.Backend] = [.ioUring, .threadPool]
    guard let value = getenv("RINGIO_TEST_BACKENDS") else { return both }
    switch String(cString: value).lowercased() {
    case "iouring": return [.ioUring]
    case "threadpool": return [.threadPool]
    default: return both
    }
}()

/// An engine on `backend`; an io_uring case that cannot set up a ring is
/// cancelled (reported as skipped) with the reason, never passed silently.
func makeEngine(_ backend: IOEngine.Backend, ringEntries: Int = 64) throws -> IOEngine {
    do {
        return try IOEngine(configuration: .init(ringEntries: ringEntries, backend: backend))
    } catch {
        try Test.cancel("io_uring is unavailable here, skipping: \(IOEngine.explainSetupFailure(error))")
    }
}

/// Submits `operation` and waits for its result (`res`, as a CQE gives it).
func perform(_ engine: IOEngine, _ operation: IORequest.Operation, owner: AnyObject? = nil,
             mayBlock: Bool = false, timeout: Duration = .seconds(10)) -> Int32? {
    let result = Locked<Int32?>(nil)
    let latch = Latch()
    engine.submit(IORequest(operation, owner: owner, mayBlock: mayBlock) { res in
        result.withLock { $0 = res }
        latch.signal()
    })
    guard latch.wait(timeout: timeout) else { return nil }
    return result.withLock { $0 }
}

/// A buffer that frees itself when the last request holding it is gone.
final class TestBuffer: @unchecked Sendable {
    // @unchecked: the bytes are written by one request at a time and read only
    // after that request's completion has been observed (through a lock).
    let pointer: UnsafeMutableRawBufferPointer
    init(count: Int) {
        pointer = .allocate(byteCount: count, alignment: 4096)
        pointer.initializeMemory(as: UInt8.self, repeating: 0)
    }
    deinit { pointer.deallocate() }
    var bytes: [UInt8] { Array(pointer) }
}

/// A fresh directory under the system's temporary directory, removed at the end.
final class TemporaryDirectory {
    let path: String
    init() {
        var template = Array("/tmp/ringio-test-XXXXXX".utf8CString)
        let p = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(p != nil, "mkdtemp failed")
        path = String(cString: p!)
    }
    deinit {
        _ = system("rm -rf '\(path)'")
    }
    func file(_ name: String) -> String { path + "/" + name }
}

/// Seeded random bytes that `pattern` cuts blocks from.
let patternSource: [UInt8] = {
    var x: UInt64 = 0x2545_F491_4F6C_DD1D
    return (0..<(1 << 16)).map { _ in
        x ^= x << 13; x ^= x >> 7; x ^= x << 17
        return UInt8(truncatingIfNeeded: x >> 24)
    }
}()

/// Deterministic bytes for block `block` of stream `stream`: a window of
/// `patternSource` chosen by both, with the two numbers stamped at the start.
func pattern(stream: Int, block: Int, count: Int) -> [UInt8] {
    let start = (stream &* 7919 &+ block &* 104_729) & (patternSource.count - 1)
    var out = [UInt8]()
    out.reserveCapacity(count)
    var i = start
    while out.count < count {
        let n = min(count - out.count, patternSource.count - i)
        out.append(contentsOf: patternSource[i..<(i + n)])
        i = 0
    }
    withUnsafeBytes(of: UInt32(truncatingIfNeeded: stream).littleEndian) { s in
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: block).littleEndian) { b in
            for j in 0..<min(4, count) { out[j] = s[j] }
            for j in 0..<min(4, max(0, count - 4)) { out[4 + j] = b[j] }
        }
    }
    return out
}

/// The open file descriptors of this process that name `dir` or a file in it
/// (read from /proc/self/fd; -1 if that cannot be listed).
func openDescriptors(into dir: String) -> Int {
    guard let list = opendir("/proc/self/fd") else { return -1 }
    defer { closedir(list) }
    var n = 0
    var target = [CChar](repeating: 0, count: 4096)
    while let entry = readdir(list) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let length = readlink("/proc/self/fd/" + name, &target, target.count - 1)
        guard length > 0 else { continue }
        let link = String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if link.hasPrefix(dir + "/") || link == dir { n += 1 }
    }
    return n
}
