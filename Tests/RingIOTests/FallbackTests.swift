#if canImport(Glibc)
import Glibc
#endif
import CRingIOTestSupport
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles

/// io_uring really refused: a seccomp filter in a child process makes
/// `io_uring_setup` fail, as a container policy does. The shared engine falls
/// back to the thread pool, says why (in `fallbackReason` and once on
/// stderr), and the channels work on it. (The whole suite also runs with
/// `RINGIO_BACKEND=threadpool`: scripts/test.)
@Suite("Fallback when io_uring is refused")
struct FallbackTests {
    static let skipMarker = "CHILD SKIP: "

    @Test("a seccomp filter refusing io_uring_setup: the shared engine uses the thread pool, says why, and channels work",
          arguments: [ENOSYS, EPERM])
    func seccompRefusal(error: Int32) async throws {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            [error = error as Int32] in
            ChildChecks.run { checks in try refusedChild(error: error, checks) }
        }
        let stderr = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        if let skip = stderr.split(separator: "\n").first(where: { $0.hasPrefix(Self.skipMarker) }) {
            try Test.cancel("\(skip.dropFirst(Self.skipMarker.count))")
        }
        ChildChecks.report(result)
        let name = error == ENOSYS ? "ENOSYS" : "EPERM"
        #expect(result == nil || stderr.contains("RingIO: using the thread-pool backend: io_uring_setup: \(name)"),
                "the fallback was not announced on stderr: \(stderr)")
    }
}

private func refusedChild(error: Int32, _ checks: ChildChecks) throws {
    // The parent may run the suite on the forced fallback, or quietly.
    unsetenv("RINGIO_BACKEND")
    unsetenv("RINGIO_QUIET")
    let rc = ringio_test_refuse_io_uring_setup(error)
    if rc != 0 {
        let line = FallbackTests.skipMarker + "cannot install a seccomp filter here (\(Errno(rawValue: -rc))), skipping\n"
        _ = line.withCString { Glibc.write(2, $0, strlen($0)) }
        return
    }
    // Asked for explicitly, io_uring fails with the filter's error.
    let refusal = Errno(rawValue: error)
    do {
        _ = try IOEngine(configuration: .init(backend: .ioUring))
        checks.check(false, "io_uring_setup succeeded under the filter")
    } catch let caught {
        checks.check(caught == refusal, "io_uring_setup failed with \(caught), not \(refusal)")
    }
    let engine = IOEngine.shared
    checks.check(engine.backend == .threadPool, "the shared engine uses \(engine.backend)")
    let name = error == ENOSYS ? "ENOSYS" : "EPERM"
    checks.check(engine.fallbackReason?.contains("io_uring_setup: \(name)") == true,
                 "fallbackReason: \(engine.fallbackReason ?? "nil")")

    // Channels on the shared engine work: a write, a read back, a random read.
    let dir = TemporaryDirectory()
    let path = dir.file("f")
    let bytes = randomBytes(3 * MiB + 5, seed: 110)
    let queue = IOQueue(label: "fallback")
    let writer = try IOChannel(kind: .stream, path: FilePath(path), mode: .writeOnly, options: [.create, .truncate],
                               permissions: [.ownerReadWrite], queue: queue)
    let w = Recorder(queue: queue)
    writer.write(data: DataChunk(bytes), queue: queue, handler: w.handler)
    checks.check(w.wait() && w.calls.last?.shape == Shape(true, nil, nil), "write: \(w.shapes)")
    writer.close()
    let cleanup = CleanupRecorder(queue: queue)
    let reader = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, cleanup: cleanup.handler)
    let r = Recorder(queue: queue)
    reader.read(offset: 1000, length: .max, queue: queue, handler: r.handler)
    checks.check(r.wait() && r.bytes == Array(bytes[1000...]), "read: \(r.shapes)")
    reader.close()
    checks.check(cleanup.wait() && cleanup.error == nil, "cleanup")
}
