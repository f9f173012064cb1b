#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase

/// Offsets and lengths at the edge of `Int64`: every entry point ends with
/// the kernel's error (`EINVAL`, `EFBIG`, `EOVERFLOW`) or reads to the end
/// of the file; nothing traps and no byte is written.
@Suite("IOChannel: offsets and lengths near Int64.max")
struct ChannelLargeOffsetTests {
    static let near = Int64.max - 100
    static let acceptable: Set<Errno> = [.invalidArgument, .fileTooLarge, .overflow]

    /// A directory on tmpfs (whose largest offset is Int64.max, so the file
    /// position may be set near it), or `nil` where there is none.
    final class TmpfsDirectory {
        let path: String
        init?() {
            var template = Array("/dev/shm/ringio-large-XXXXXX".utf8CString)
            guard let p = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else { return nil }
            path = String(cString: p)
        }
        deinit { _ = system("rm -rf '\(path)'") }
    }

    struct Outcome: CustomStringConvertible {
        var bytes = 0
        var error: Errno?
        var unwritten: Int?
        var finished = false
        var description: String { "bytes \(bytes), error \(error.map { "\($0)" } ?? "nil"), unwritten \(unwritten ?? -1)" }

        /// A read: the end of file (nothing read), or an acceptable error.
        var isCleanRead: Bool {
            finished && (error == nil ? bytes == 0 : ChannelLargeOffsetTests.acceptable.contains(error!))
        }

        /// A write of `count` bytes: an acceptable error, all of them unwritten.
        func isCleanWrite(_ count: Int) -> Bool {
            finished && error.map { ChannelLargeOffsetTests.acceptable.contains($0) } == true && unwritten == count
        }
    }

    func read(_ channel: IOChannel, offset: Int64, length: Int) -> Outcome {
        let state = Locked(Outcome())
        let latch = Latch()
        channel.read(offset: offset, length: length, queue: .global) { done, data, error in
            state.withLock { $0.bytes += data?.count ?? 0 }
            if done {
                state.withLock { $0.error = error; $0.finished = true }
                latch.signal()
            }
        }
        _ = latch.wait(timeout: .seconds(10))
        return state.withLock { $0 }
    }

    func write(_ channel: IOChannel, offset: Int64, count: Int) -> Outcome {
        let state = Locked(Outcome())
        let latch = Latch()
        channel.write(offset: offset, data: DataChunk([UInt8](repeating: 7, count: count)), queue: .global) { done, rest, error in
            if done {
                state.withLock { $0 = Outcome(bytes: 0, error: error, unwritten: rest?.count ?? 0, finished: true) }
                latch.signal()
            }
        }
        _ = latch.wait(timeout: .seconds(10))
        return state.withLock { $0 }
    }

    func asyncRead(_ channel: IOChannel, offset: Int64, length: Int) async -> Outcome {
        do {
            let data = try await channel.read(offset: offset, length: length)
            return Outcome(bytes: data.count, finished: true)
        } catch {
            return Outcome(error: error, finished: true)
        }
    }

    func asyncWrite(_ channel: IOChannel, offset: Int64, count: Int) async -> Outcome {
        do {
            try await channel.write(offset: offset, data: DataChunk([UInt8](repeating: 7, count: count)))
            return Outcome(unwritten: 0, finished: true)
        } catch {
            return Outcome(error: error, unwritten: count, finished: true)
        }
    }

    func chunks(_ channel: IOChannel, offset: Int64) async -> Outcome {
        var outcome = Outcome()
        do {
            for try await chunk in channel.chunks(offset: offset) { outcome.bytes += chunk.count }
        } catch {
            outcome.error = error
        }
        outcome.finished = true
        return outcome
    }

    func oneShotRead(_ fd: FileDescriptor, engine: IOEngine, length: Int) -> Outcome {
        let state = Locked(Outcome())
        let latch = Latch()
        IO.read(from: fd, length: length, queue: .global, engine: engine) { data, error in
            state.withLock { $0 = Outcome(bytes: data.count, error: error, finished: true) }
            latch.signal()
        }
        _ = latch.wait(timeout: .seconds(10))
        return state.withLock { $0 }
    }

    func oneShotWrite(_ fd: FileDescriptor, engine: IOEngine, count: Int) -> Outcome {
        let state = Locked(Outcome())
        let latch = Latch()
        IO.write(to: fd, data: DataChunk([UInt8](repeating: 7, count: count)), queue: .global, engine: engine) { rest, error in
            state.withLock { $0 = Outcome(error: error, unwritten: rest?.count ?? 0, finished: true) }
            latch.signal()
        }
        _ = latch.wait(timeout: .seconds(10))
        return state.withLock { $0 }
    }

    @Test("random channels: reads and writes at offsets near Int64.max end cleanly, for every entry point",
          arguments: allBackends)
    func randomChannel(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("random")
        let content = randomBytes(1000, seed: 1)
        try writeFile(path, content)
        let fd = try openFile(path)
        defer { try? fd.close() }
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: .global, engine: engine)
        let near = Self.near
        var results: [(String, Bool, Outcome)] = []
        for (offset, length) in [(near, 4 * MiB), (near, Int.max), (Int64.max, 1), (Int64.max, Int.max),
                                 (near, 100), (Int64.max - 4096, 1 << 20)] {
            let outcome = read(channel, offset: offset, length: length)
            results.append(("read(\(offset), \(length))", outcome.isCleanRead, outcome))
            let async = await asyncRead(channel, offset: offset, length: length)
            results.append(("async read(\(offset), \(length))", async.isCleanRead, async))
        }
        for offset in [near, Int64.max, Int64.max - 4096] {
            let outcome = await chunks(channel, offset: offset)
            results.append(("chunks(\(offset))", outcome.isCleanRead, outcome))
        }
        for (offset, count) in [(near, 4 * MiB), (Int64.max, 1), (Int64.max - 10, 100), (Int64.max - 4096, 2 << 20)] {
            let outcome = write(channel, offset: offset, count: count)
            results.append(("write(\(offset), \(count))", outcome.isCleanWrite(count), outcome))
            let async = await asyncWrite(channel, offset: offset, count: count)
            results.append(("async write(\(offset), \(count))", async.isCleanWrite(count), async))
        }
        channel.close()
        for (name, ok, outcome) in results { #expect(ok, "\(name): \(outcome)") }
        #expect(try readFile(path) == content)
    }

    @Test("stream channels, one-shots and random channels whose base is a file position near Int64.max (tmpfs)",
          arguments: allBackends)
    func positionNearMax(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        guard let dir = TmpfsDirectory() else {
            try Test.cancel("no tmpfs at /dev/shm, skipping")
        }
        let path = dir.path + "/near-max"
        let content = randomBytes(1000, seed: 2)
        try writeFile(path, content)
        let fd = try openFile(path)
        defer { try? fd.close() }
        guard lseek(fd.rawValue, off_t(Self.near), SEEK_SET) == Self.near else {
            try Test.cancel("this file system does not take a position near Int64.max")
        }
        var results: [(String, Bool, Outcome)] = []
        func at(_ position: Int64) { _ = lseek(fd.rawValue, off_t(position), SEEK_SET) }

        // A random channel based near the end of the offsets.
        let random = IOChannel(kind: .random, fileDescriptor: fd, queue: .global, engine: engine)
        for (offset, length) in [(Int64(0), 4 * MiB), (0, Int.max), (200, 10), (Int64.max, 1)] {
            let outcome = read(random, offset: offset, length: length)
            results.append(("random read(\(offset), \(length))", outcome.isCleanRead, outcome))
        }
        let chunked = await chunks(random, offset: 0)
        results.append(("random chunks(0)", chunked.isCleanRead, chunked))
        for (offset, count) in [(Int64(0), 4 * MiB), (200, 10)] {
            let outcome = write(random, offset: offset, count: count)
            results.append(("random write(\(offset), \(count))", outcome.isCleanWrite(count), outcome))
        }
        random.close()

        // A stream channel at that position.
        let stream = IOChannel(kind: .stream, fileDescriptor: fd, queue: .global, engine: engine)
        for length in [4 * MiB, Int.max, 100] {
            at(Self.near)
            let outcome = read(stream, offset: 0, length: length)
            results.append(("stream read(\(length))", outcome.isCleanRead, outcome))
            at(Self.near)
            let async = await asyncRead(stream, offset: 0, length: length)
            results.append(("stream async read(\(length))", async.isCleanRead, async))
        }
        at(Self.near)
        let streamChunks = await chunks(stream, offset: 0)
        results.append(("stream chunks()", streamChunks.isCleanRead, streamChunks))
        at(Self.near)
        let streamWrite = write(stream, offset: 0, count: 4 * MiB)
        results.append(("stream write(4 MiB)", streamWrite.isCleanWrite(4 * MiB), streamWrite))
        at(Self.near)
        let streamAsyncWrite = await asyncWrite(stream, offset: 0, count: 4 * MiB)
        results.append(("stream async write(4 MiB)", streamAsyncWrite.isCleanWrite(4 * MiB), streamAsyncWrite))
        stream.close()

        // The one-shots.
        at(Self.near)
        let oneRead = oneShotRead(fd, engine: engine, length: 4 * MiB)
        results.append(("IO.read(4 MiB)", oneRead.isCleanRead, oneRead))
        at(Self.near)
        let oneWrite = oneShotWrite(fd, engine: engine, count: 4 * MiB)
        results.append(("IO.write(4 MiB)", oneWrite.isCleanWrite(4 * MiB), oneWrite))

        for (name, ok, outcome) in results { #expect(ok, "\(name): \(outcome)") }
        #expect(try readFile(path) == content)
    }
}
