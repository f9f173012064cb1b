#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOBase

/// A path channel opens from the dentry cache on the caller's thread
/// (`openat2` with `RESOLVE_CACHED`); an error of one path there must not
/// turn that off for the whole process (`CachedOpens`).
@Suite("Cached opens after a path's own error")
struct CachedOpenFallbackTests {
    #if DEBUG
    @Test("EPERM or EINVAL from one path's cached open: that channel works through the engine, the next opens from the cache",
          arguments: allBackends)
    func pathErrorKeepsCachedOpens(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        for error in [Errno.notPermitted, .invalidArgument] {
            let dir = TemporaryDirectory()
            let bytes = randomBytes(3000, seed: 26)
            try writeFile(dir.file("f"), bytes)
            let scope = Syscall.Mock.Scope.files(under: FilePath(dir.path))

            let refused = Syscall.Mock.inject(.openat2, errno: error, times: 1, scope: scope)
            let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                        queue: .global, engine: engine)
            #expect(refused.fired == 1, "the check tried the cached open")
            refused.remove()
            #expect(try await channel.read(offset: 0, length: 4096) == DataChunk(bytes))
            channel.close()
            #expect(CachedOpens.available, "\(error) of one path turned cached opens off")

            // The next path channel's check still calls openat2 (EAGAIN:
            // as if not cached, so it goes to the engine and still works).
            let seen = Syscall.Mock.inject(.openat2, errno: .resourceTemporarilyUnavailable, times: 1, scope: scope)
            let next = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                     queue: .global, engine: engine)
            #expect(seen.fired == 1, "cached opens were turned off after \(error)")
            seen.remove()
            #expect(try await next.read(offset: 1000, length: 4096) == DataChunk(Array(bytes[1000...])))
            next.close()
        }
    }
    #endif
}
