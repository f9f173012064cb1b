#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import SystemPackage
import Synchronization
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

/// An awaited read or write of a regular file with nothing ahead of it on its
/// fd is done on the caller's thread before any suspension
/// (ChannelCore+Inline.swift), under the rules of a queued operation.
@Suite("Awaited reads and writes done on the caller's thread")
struct AwaitedInlineTests {
    static func file(_ dir: TemporaryDirectory, _ name: String, _ bytes: [UInt8],
                     options: FileDescriptor.OpenOptions = [.create, .truncate]) throws -> FileDescriptor {
        let fd = try FileDescriptor.open(FilePath(dir.file(name)), .readWrite, options: options,
                                         permissions: [.ownerReadWrite])
        _ = try fd.writeAll(bytes)
        _ = try fd.seek(offset: 0, from: .start)
        return fd
    }

    static func contents(_ fd: FileDescriptor) -> [UInt8] {
        var st = stat()
        guard fstat(fd.rawValue, &st) == 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        let n = bytes.withUnsafeMutableBytes { pread(fd.rawValue, $0.baseAddress, $0.count, 0) }
        return Array(bytes.prefix(Swift.max(n, 0)))
    }

    static func awaitedInline(_ channel: IOChannel) -> Int {
        channel.core.currentEntry?.awaitedInline.load(ordering: .relaxed) ?? -1
    }

    @Test("awaited stream reads and writes done inline keep the file position, in order", arguments: allBackends)
    func streamPosition(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(64 * KiB, seed: 21)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        guard InlineReadTests.noWaitWorks(fd) else {
            try Test.cancel("the file system under /tmp refuses RWF_NOWAIT reads")
        }
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: IOQueue(label: "inline-stream"), engine: engine)
        let first = try await channel.read(length: 1000)
        let second = try await channel.read(offset: 12345 /* ignored: a stream */, length: 1000)
        #expect(first == DataChunk(bytes[0..<1000]))
        #expect(second == DataChunk(bytes[1000..<2000]))
        #expect(position(of: fd) == 2000)
        let fresh = randomBytes(500, seed: 22)
        try await channel.write(data: DataChunk(fresh))
        #expect(position(of: fd) == 2500)
        let third = try await channel.read(length: 100)
        #expect(third == DataChunk(bytes[2500..<2600]))
        #expect(Self.awaitedInline(channel) == 4, "every one of them done on the caller's thread")
        var expected = bytes
        expected.replaceSubrange(2000..<2500, with: fresh)
        #expect(Self.contents(fd) == expected)
        // Reading up to the end of the file: the rest, then empty.
        _ = try fd.seek(offset: Int64(bytes.count - 10), from: .start)
        let tail = try await channel.read(length: 4096)
        #expect(tail == DataChunk(bytes[(bytes.count - 10)...]))
        let none = try await channel.read(length: 4096)
        #expect(none.isEmpty)
        channel.close()
    }

    @Test("an awaited read or write issued right behind queued stream writes waits for them: it never overtakes",
          arguments: allBackends)
    func noOvertaking(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let fd = try Self.file(dir, "log", [], options: [.create, .truncate, .append])
        defer { try? fd.close() }
        let queue = IOQueue(label: "inline-order")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        var expected: [UInt8] = []
        for round in 0..<20 {
            // Eight records queued with handlers (to the engine), then one
            // awaited: the awaited one lands last.
            let recorder = Recorder(queue: queue)
            let left = Atomic<Int>(8)
            let all = Latch()
            for i in 0..<8 {
                let record = [UInt8](repeating: UInt8(truncatingIfNeeded: round * 16 + i), count: 4096)
                expected += record
                channel.write(data: DataChunk(record), queue: queue) { done, _, error in
                    if error != nil { recorder.handler(done, nil, error) }
                    if done && left.subtract(1, ordering: .relaxed).newValue == 0 { all.signal() }
                }
            }
            let last = [UInt8](repeating: 0xEE, count: 4096)
            expected += last
            try await channel.write(data: DataChunk(last))
            #expect(all.wait(), "round \(round): the queued writes ended")
            #expect(recorder.calls.isEmpty, "round \(round): no write failed")
        }
        #expect(Self.contents(fd) == expected)
        // A stream read queued behind a write on a regular file: reads what
        // the write left behind the position.
        let data = randomBytes(64 * KiB, seed: 23)
        let rw = try Self.file(dir, "rw", data)
        defer { try? rw.close() }
        let stream = IOChannel(kind: .stream, fileDescriptor: rw, queue: queue, engine: engine)
        let fresh = randomBytes(8 * KiB, seed: 24)
        let wrote = Recorder(queue: queue)
        stream.write(data: DataChunk(fresh), queue: queue, handler: wrote.handler)
        let after = try await stream.read(length: 4096)
        #expect(after == DataChunk(data[(8 * KiB)..<(12 * KiB)]))
        #expect(wrote.wait())
        #expect(position(of: rw) == Int64(12 * KiB))
        channel.close()
        stream.close()
    }

    @Test("a barrier queued while an awaited operation runs inline waits for it; one right after sees its bytes",
          arguments: allBackends)
    func barrierAfterInline(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let fd = try Self.file(dir, "f", [])
        defer { try? fd.close() }
        let queue = IOQueue(label: "inline-barrier")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        // Right after: the barrier sees the bytes and the position.
        try await channel.write(data: DataChunk(randomBytes(3000, seed: 25)))
        #expect(Self.awaitedInline(channel) == 1)
        #expect(positionInBarrier(of: channel, fd) == 3000)
        // An inline operation under way (begun as `writeNow` begins it):
        // a barrier and a stream write queued meanwhile wait for its end.
        // (The barrier above counts as running until its handler has
        // returned, a moment after it signalled: until then nothing may go
        // inline, so wait for that.)
        var begun = channel.core.beginInline(isWrite: true) { _ in true }
        for _ in 0..<500 where begun == nil {
            milliseconds(10)
            begun = channel.core.beginInline(isWrite: true) { _ in true }
        }
        let (entry, _) = try #require(begun, "the finished barrier still held the fd after 5 s")
        let barrierRan = Atomic<Bool>(false)
        let barrierDone = Latch()
        let queueBarrier = {  // (the handler form, not the awaited one)
            channel.barrier {
                barrierRan.store(true, ordering: .releasing)
                barrierDone.signal()
            }
        }
        queueBarrier()
        let queued = Recorder(queue: queue)
        channel.write(data: DataChunk([1, 2, 3]), queue: queue, handler: queued.handler)
        // Nor may another awaited operation go inline now.
        #expect(channel.core.readNow(offset: 0, length: 10).isSubmit)
        milliseconds(100)
        let ranEarly = barrierRan.load(ordering: .acquiring)
        #expect(!ranEarly, "the barrier ran while an inline operation was under way")
        #expect(queued.calls.isEmpty, "a queued write overtook an inline operation")
        entry.endInline(stream: true, isWrite: true)
        #expect(barrierDone.wait())
        #expect(queued.wait())
        #expect(position(of: fd) == 3003)
        channel.close()
    }

    @Test("a random channel's awaited reads and writes done inline, at its base and offsets", arguments: allBackends)
    func randomInline(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(32 * KiB, seed: 26)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        guard InlineReadTests.noWaitWorks(fd) else {
            try Test.cancel("the file system under /tmp refuses RWF_NOWAIT reads")
        }
        _ = try fd.seek(offset: 1000, from: .start)  // the channel's base
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: .global, engine: engine)
        let fresh = randomBytes(4096, seed: 27)
        try await channel.write(offset: 4096, data: DataChunk(fresh))
        let back = try await channel.read(offset: 4096, length: 4096)
        #expect(back == DataChunk(fresh))
        let before = try await channel.read(offset: 0, length: 4096)
        #expect(before == DataChunk(bytes[1000..<5096]))
        #expect(Self.awaitedInline(channel) == 3)
        #expect(position(of: fd) == 1000, "a random channel leaves the position alone")
        // A range past the largest offset goes the usual way (EINVAL for the write).
        await #expect(throws: Errno.invalidArgument) {
            try await channel.write(offset: .max - 10, data: DataChunk(fresh))
        }
        channel.close()
    }

    @Test("ENOSPC on a write done inline: thrown, nothing reported written that was not, the position where the bytes end",
          arguments: allBackends)
    func inlineWriteError(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let fd = try Self.file(dir, "log", [], options: [.create, .truncate, .append])
        defer { try? fd.close() }
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: IOQueue(label: "inline-enospc"), engine: engine)
        let first = randomBytes(4096, seed: 30)
        try await channel.write(data: DataChunk(first))
        let enospc = Syscall.Mock.inject(.write, errno: .noSpace, times: 1, scope: .files(under: FilePath(dir.path)))
        await #expect(throws: Errno.noSpace) { try await channel.write(data: DataChunk(randomBytes(4096, seed: 31))) }
        enospc.remove()
        #expect(enospc.fired == 1)
        let third = randomBytes(4096, seed: 32)
        try await channel.write(data: DataChunk(third))
        #expect(Self.contents(fd) == first + third)
        #expect(position(of: fd) == 8192)
        #expect(Self.awaitedInline(channel) == 3)
        channel.close()
    }

    @Test("a task cancelled before its awaited read or write: ECANCELED, nothing read or written", arguments: allBackends)
    func cancelledBefore(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(16 * KiB, seed: 28)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: IOQueue(label: "inline-cancel"), engine: engine)
        let task = Task { () async -> (Result<DataChunk, Errno>, Result<Void, Errno>) in
            withUnsafeCurrentTask { $0?.cancel() }
            let read: Result<DataChunk, Errno>
            do throws(Errno) { read = .success(try await channel.read(length: 4096)) } catch { read = .failure(error) }
            let wrote: Result<Void, Errno>
            do throws(Errno) { wrote = .success(try await channel.write(data: DataChunk([9, 9, 9]))) } catch {
                wrote = .failure(error)
            }
            return (read, wrote)
        }
        let (read, wrote) = await task.value
        #expect(throws: Errno.canceled) { try read.get() }
        #expect(throws: Errno.canceled) { try wrote.get() }
        #expect(position(of: fd) == 0)
        #expect(Self.contents(fd) == bytes)
        channel.close()
    }

    @Test("tasks cancelled while they read inline: every read gives its bytes or ECANCELED, and the channel goes on",
          arguments: allBackends)
    func cancellationRace(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(256 * KiB, seed: 29)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: .global, engine: engine)
        let counts = RaceCounts()
        for round in 0..<20 {
            var tasks: [Task<Void, Never>] = []
            for t in 0..<8 {
                let first: Int = (round * 8 + t) * 200
                tasks.append(Task { @Sendable in
                    for i in 0..<200 {
                        let block: Int = (first + i) % 64
                        let at: Int = block * 4096
                        do throws(Errno) {
                            let data = try await channel.read(offset: Int64(at), length: 4096)
                            if data != DataChunk(bytes[at..<(at + 4096)]) { counts.wrong.add(1, ordering: .relaxed) }
                        } catch {
                            if error != .canceled { counts.wrong.add(1, ordering: .relaxed) }
                            counts.cancelled.add(1, ordering: .relaxed)
                            return
                        }
                    }
                })
            }
            // Cancel them at different moments of their loops.
            for (t, task) in tasks.enumerated() {
                if t % 2 == 0 { await Task.yield() }
                task.cancel()
            }
            for task in tasks { await task.value }
        }
        let wrong = counts.wrong.load(ordering: .relaxed)
        #expect(wrong == 0)
        // The channel still reads.
        let again = try await channel.read(offset: 0, length: 4096)
        #expect(again == DataChunk(bytes[0..<4096]))
        channel.close()
    }
}

/// What the tasks of `cancellationRace` saw.
private final class RaceCounts: Sendable {
    let wrong = Atomic<Int>(0)
    let cancelled = Atomic<Int>(0)
}

extension ChannelCore.InlineRead {
    var isSubmit: Bool {
        if case .submit = self { return true }
        return false
    }
}
