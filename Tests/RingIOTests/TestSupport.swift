#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import Synchronization
import SystemPackage
import Testing
@_spi(Engine) @testable import RingIO

/// Both backends, for parameterized tests.
let allBackends: [IOEngine.Backend] = [.ioUring, .threadPool]

/// An engine on `backend`; an io_uring case that cannot set up a ring is
/// cancelled (reported as skipped) with the reason, never passed silently.
func makeEngine(_ backend: IOEngine.Backend, ringEntries: Int = 64) throws -> IOEngine {
    do {
        return try IOEngine(configuration: .init(ringEntries: ringEntries, backend: backend))
    } catch {
        try Test.cancel("io_uring is unavailable here, skipping: \(IOEngine.explainSetupFailure(error))")
    }
}

/// A one-shot latch a test waits on with a timeout.
final class Latch: Sendable {
    private let group = IOGroup()
    init(count: Int = 1) { for _ in 0..<count { group.enter() } }
    func signal() { group.leave() }
    /// Returns false when `timeout` passed first.
    func wait(timeout: Duration = .seconds(10)) -> Bool { group.wait(timeout: timeout) }
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

/// Deterministic bytes for block `block` of stream `stream`.
func pattern(stream: Int, block: Int, count: Int) -> [UInt8] {
    var x = UInt64(truncatingIfNeeded: stream &* 1_000_003 &+ block &* 7919 &+ 1)
    return (0..<count).map { _ in
        x = x &* 6364136223846793005 &+ 1442695040888963407
        return UInt8(truncatingIfNeeded: x >> 56)
    }
}
