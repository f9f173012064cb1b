#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase

/// docs/Semantics.md, "Kinds": by the time a stream operation's final handler
/// call runs, the file position is already where that operation left it.
@Suite("IOChannel: the file position when a stream operation's last call runs")
struct ChannelPositionTests {
    @Test("a handler's final call sees the position after its own write and read, 300 times over",
          arguments: allBackends)
    func finalCallSeesPosition(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("position")
        try writeFile(path, [])
        let fd = try openFile(path)
        defer { try? fd.close() }
        // A concurrent queue: the final call may run on another thread at once.
        let queue = IOQueue(label: "position", kind: .concurrent)
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let wrong = Locked<[String]>([])
        var expected: Int64 = 0
        for i in 0..<300 {
            let count = 1 + (i * 7919) % 20_000
            expected += Int64(count)
            let want = expected
            let latch = Latch()
            channel.write(data: DataChunk(randomBytes(count, seed: UInt64(i))), queue: queue) { done, _, error in
                guard done else { return }
                let seen = Int64(lseek(fd.rawValue, 0, SEEK_CUR))
                if seen != want || error != nil { wrong.withLock { $0.append("write \(i): \(seen) != \(want)") } }
                latch.signal()
            }
            #expect(latch.wait(timeout: .seconds(10)))
        }
        #expect(lseek(fd.rawValue, 0, SEEK_SET) == 0)
        var position: Int64 = 0
        for i in 0..<300 {
            let count = 1 + (i * 104_729) % 30_000
            position = Swift.min(position + Int64(count), expected)
            let want = position
            let latch = Latch()
            channel.read(length: count, queue: queue) { done, _, _ in
                guard done else { return }
                let seen = Int64(lseek(fd.rawValue, 0, SEEK_CUR))
                if seen != want { wrong.withLock { $0.append("read \(i): \(seen) != \(want)") } }
                latch.signal()
            }
            #expect(latch.wait(timeout: .seconds(10)))
        }
        #expect(wrong.withLock { $0 }.isEmpty, "\(wrong.withLock { $0.prefix(5) })")
        channel.close()
    }

    @Test("async write and read: when the call returns, the position is where it left it, 300 times over",
          arguments: allBackends)
    func asyncSeesPosition(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("async-position")
        try writeFile(path, [])
        let fd = try openFile(path)
        defer { try? fd.close() }
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: IOQueue(label: "async"), engine: engine)
        var expected: Int64 = 0
        var wrong: [String] = []
        for i in 0..<300 {
            let count = 1 + (i * 7919) % 20_000
            try await channel.write(data: DataChunk(randomBytes(count, seed: UInt64(i))))
            expected += Int64(count)
            let seen = Int64(lseek(fd.rawValue, 0, SEEK_CUR))
            if seen != expected { wrong.append("write \(i): \(seen) != \(expected)") }
        }
        _ = lseek(fd.rawValue, 0, SEEK_SET)
        var position: Int64 = 0
        for i in 0..<300 {
            let count = 1 + (i * 104_729) % 30_000
            _ = try await channel.read(length: count)
            position = Swift.min(position + Int64(count), expected)
            let seen = Int64(lseek(fd.rawValue, 0, SEEK_CUR))
            if seen != position { wrong.append("read \(i): \(seen) != \(position)") }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
        channel.close()
    }

    @Test("queued stream writes (pipelined): each final call sees at least its own end; the last sees the total",
          arguments: allBackends)
    func queuedWritesSeePosition(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("queued")
        try writeFile(path, [])
        let fd = try openFile(path)
        defer { try? fd.close() }
        let queue = IOQueue(label: "queued")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let n = 500
        let wrong = Locked<[String]>([])
        let group = IOGroup()
        var end: Int64 = 0
        for i in 0..<n {
            let count = 512 + (i * 31) % 8192
            end += Int64(count)
            let want = end
            group.enter()
            channel.write(data: DataChunk(randomBytes(count, seed: UInt64(i))), queue: queue) { done, _, error in
                guard done else { return }
                let seen = Int64(lseek(fd.rawValue, 0, SEEK_CUR))
                if seen < want || error != nil { wrong.withLock { $0.append("write \(i): \(seen) < \(want)") } }
                if i == n - 1 && seen != want { wrong.withLock { $0.append("last: \(seen) != \(want)") } }
                group.leave()
            }
        }
        #expect(group.wait(timeout: .seconds(30)))
        #expect(wrong.withLock { $0 }.isEmpty, "\(wrong.withLock { $0.prefix(5) })")
        channel.close()
    }
}
