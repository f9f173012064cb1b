#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOQueue

/// A channel made without a cleanup handler submits nothing to its queue
/// when it closes (a worker woken to run an empty closure was most of a
/// short-lived path channel's close); one made with a handler runs it there.
@Suite("channels without a cleanup handler")
struct ChannelNoCleanupTests {
    @Test("closing a channel made without cleanup submits nothing to its queue; with cleanup, one item",
          arguments: allBackends)
    func closeSubmitsNothing(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("a"), randomBytes(4096, seed: 41))
        let queue = IOQueue(label: "no-cleanup")
        queue.suspend()
        let ran = Latch()
        let fd = try FileDescriptor.open(FilePath(dir.file("a")), .readOnly)
        defer { try? fd.close() }
        let without = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let path = try IOChannel(kind: .random, path: FilePath(dir.file("a")), mode: .readOnly, queue: queue,
                                 engine: engine)
        let with = try IOChannel(kind: .random, path: FilePath(dir.file("a")), mode: .readOnly, queue: queue,
                                 engine: engine) { _ in ran.signal() }
        without.close()
        path.close()
        with.close()
        // The one cleanup handler is submitted (the path channel's after its
        // check ends); the other two channels' closes submitted nothing.
        #expect(waitUntil(timeout: .seconds(300)) { queue.waitingItemCount >= 1 })
        // The fd channel's own fd stays open (the test's); the path channels'
        // are closed once their checks and closes have ended.
        #expect(waitUntil(timeout: .seconds(300)) { openDescriptors(into: dir.path) <= 1 })
        usleep(20_000)
        #expect(queue.waitingItemCount == 1)
        queue.resume()
        #expect(ran.wait(timeout: .seconds(300)))
    }
}
