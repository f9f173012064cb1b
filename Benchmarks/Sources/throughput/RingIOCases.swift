// RingIO's side: IOChannel through its handler API, shaped like the DispatchIO
// anchors so that the two compare operation for operation, and through its
// async API (`chunks()`, awaited reads and writes, `IO.copyFile`).
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import RingIO
import SystemPackage
import Synchronization

enum RingIOCases {
    static var engineDescription: String {
        let engine = IOEngine.shared
        return "\(engine.backend)" + (engine.fallbackReason.map { " (fallback: \($0))" } ?? "")
    }

    static func sequentialRead(_ path: String, size: Int, expected: UInt64, timeout: Double) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        let queue = IOQueue(label: "throughput.read")
        let closed = Completion()
        let channel = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: fd), queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let tally = Tally()
        let checksum = SharedStreamChecksum()
        let done = Completion()
        let start = now()
        channel.read(offset: 0, length: .max, queue: queue) { isDone, data, error in
            tally.add(data?.count ?? 0)
            data?.apply { _, _, bytes in checksum.add(bytes); return true }
            if isDone { done.finish(error.map { "read ended with \($0)" }) }
        }
        try done.wait("RingIO stream read", timeout: timeout) { tally.summary }
        let elapsed = seconds(since: start)
        channel.close()
        try closed.wait("RingIO cleanup handler", timeout: timeout)
        guard tally.bytes == size else { throw BenchError("RingIO read \(tally.bytes) of \(size) bytes (\(tally.summary))") }
        try requireChecksum("RingIO stream read", checksum.value, expected)
        return Sample(rate: Double(size) / elapsed, note: "\(tally.calls) handler calls, largest delivery \(tally.largest >> 10) KiB")
    }

    /// `IO.copyFile`: a stream read channel's `chunks()` (at most two read
    /// ahead), each awaited through a stream write channel's async `write`.
    static func copyAsync(_ source: String, _ destination: String, timeout: Double) throws {
        let done = Completion()
        Task {
            do {
                try await IO.copyFile(from: FilePath(source), to: FilePath(destination))
                done.finish()
            } catch {
                done.finish("IO.copyFile failed: \(error)")
            }
        }
        try done.wait("RingIO IO.copyFile", timeout: timeout)
    }

    /// A stream read channel whose handler writes each delivered chunk to a
    /// stream write channel, at most `copyWindowBytes` outstanding; then a
    /// barrier on the writer, close, and the cleanup handlers.
    static func copy(_ source: String, _ destination: String, timeout: Double) throws {
        let input = try openFile(source, O_RDONLY)
        let output = try openFile(destination, O_WRONLY | O_CREAT | O_TRUNC)
        let readQueue = IOQueue(label: "throughput.copy.read")
        let writeQueue = IOQueue(label: "throughput.copy.write")
        let readerClosed = Completion(), writerClosed = Completion()
        let reader = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: input), queue: readQueue) { _ in
            close(input)
            readerClosed.finish()
        }
        let writer = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: output), queue: writeQueue) { _ in
            close(output)
            writerClosed.finish()
        }
        let window = WriteWindow(limit: copyWindowBytes)
        let tally = Tally()
        let readDone = Completion()
        reader.read(offset: 0, length: .max, queue: readQueue) { isDone, data, error in
            if let data, !data.isEmpty {
                let count = data.count
                tally.add(count)
                window.acquire(count)
                writer.write(offset: 0, data: data, queue: writeQueue) { writeDone, unwritten, writeError in
                    if writeDone {
                        window.release(count, error: writeError.map { "write ended with \($0), \(unwritten?.count ?? 0) bytes unwritten" })
                    }
                }
            }
            if isDone { readDone.finish(error.map { "read ended with \($0)" }) }
        }
        try readDone.wait("RingIO copy read", timeout: timeout) { tally.summary }
        let barrier = Completion()
        writer.barrier { barrier.finish() }
        try barrier.wait("RingIO copy: barrier on the writer", timeout: timeout)
        try window.drain("RingIO copy writes", timeout: timeout)
        reader.close()
        writer.close()
        try readerClosed.wait("RingIO copy: reader cleanup", timeout: timeout)
        try writerClosed.wait("RingIO copy: writer cleanup", timeout: timeout)
    }

    /// `onRing`: the handlers run on the engine's ring queue (`IOEngine.queue`,
    /// the ring thread), and each starts the next read from there.
    static func randomReads(_ path: String, offsets: [Int64], depth: Int, expected: UInt64, timeout: Double,
                            onRing: Bool = false) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        let queue = onRing ? IOEngine.shared.queue : IOQueue(label: "throughput.random")
        let closed = Completion()
        let channel = IOChannel(kind: .random, fileDescriptor: FileDescriptor(rawValue: fd), queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let checksums = ReadChecksums()
        let calls = Counter()
        let seen = ReadCounts(count: offsets.count)
        let loop = InFlightLoop(count: offsets.count) { i, finished in
            let offset = offsets[i]
            channel.read(offset: offset, length: 4096, queue: queue) { done, data, error in
                _ = calls.take()
                let (before, bytes) = seen.add(i, data?.count ?? 0)
                data?.apply { _, at, chunk in checksums.add(chunk, at: offset, from: before + at); return true }
                if done { finished(bytes == 4096 && error == nil ? nil : "read at \(offset): \(bytes) bytes, \(error.map { "\($0)" } ?? "no error")") }
            }
        }
        let elapsed = try loop.run(depth: depth, what: "RingIO random reads", timeout: timeout)
        channel.close()
        try closed.wait("RingIO cleanup handler", timeout: timeout)
        try requireChecksum("RingIO random reads", checksums.value, expected)
        return Sample(rate: Double(offsets.count) / elapsed,
                      note: "\(offsets.count) reads, \(fixed(Double(calls.taken) / Double(offsets.count), 2)) handler calls per read")
    }

    // MARK: - async API

    /// A stream path channel's `chunks()`, awaited one by one.
    static func sequentialReadAsync(_ path: String, size: Int, expected: UInt64, timeout: Double) throws -> Sample {
        let (bytes, checksum, elapsed) = try blocking("RingIO chunks()", timeout: timeout) {
            let start = now()
            let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: .global)
            defer { channel.close() }
            var checksum = StreamChecksum()
            for try await chunk in channel.chunks() {
                chunk.apply { _, _, bytes in checksum.add(bytes); return true }
            }
            return (checksum.position, checksum.value, seconds(since: start))
        }
        guard bytes == size else { throw BenchError("RingIO chunks() read \(bytes) of \(size) bytes") }
        try requireChecksum("RingIO chunks()", checksum, expected)
        return Sample(rate: Double(size) / elapsed)
    }

    /// `depth` tasks, each awaiting `read(offset:length:)` on one random channel in turn.
    /// `onRing`: the tasks prefer the engine's ring queue as their executor,
    /// so each resumes on the ring thread from its read's completion.
    static func randomReadsAsync(_ path: String, offsets: [Int64], depth: Int, expected: UInt64, timeout: Double,
                                 onRing: Bool = false) throws -> Sample {
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: .global)
        defer { channel.close() }
        let checksums = ReadChecksums()
        let elapsed = try blocking("RingIO async random reads", timeout: timeout) {
            let start = now()
            let reads: @Sendable () async throws -> Void = {
                try await inFlight(count: offsets.count, depth: depth) { _, i in
                    let chunk = try await channel.read(offset: offsets[i], length: 4096)
                    guard chunk.count == 4096 else { throw BenchError("read \(chunk.count) bytes at \(offsets[i])") }
                    chunk.apply { _, at, bytes in checksums.add(bytes, at: offsets[i], from: at); return true }
                }
            }
            if onRing {
                try await withTaskExecutorPreference(IOEngine.shared.queue) { try await reads() }
            } else {
                try await reads()
            }
            return seconds(since: start)
        }
        try requireChecksum("RingIO async random reads", checksums.value, expected)
        return Sample(rate: Double(offsets.count) / elapsed, note: "\(offsets.count) reads")
    }

    /// `IO.copyFile` for each file, `filesInFlight` at once.
    static func copyFiles(_ source: String, _ destination: String, count: Int, timeout: Double) throws -> Double {
        try blocking("RingIO IO.copyFile × \(count)", timeout: timeout) {
            let start = now()
            try await inFlight(count: count, depth: filesInFlight) { _, i in
                try await IO.copyFile(from: FilePath(smallFilePath(source, i)), to: FilePath(smallFilePath(destination, i)))
            }
            return seconds(since: start)
        }
    }

    /// Every record handed to a stream write channel at once (the channel
    /// queues and pipelines them), then a barrier that calls fsync.
    static func appendLog(_ path: String, log: AppendLog, timeout: Double) throws -> Double {
        let fd = try openFile(path, O_WRONLY | O_CREAT | O_TRUNC)
        let queue = IOQueue(label: "throughput.append")
        let closed = Completion()
        let channel = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: fd), queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let payload = DataChunk(log.payload)
        let failure = Mutex<String?>(nil)
        let start = now()
        for index in 0..<log.records {
            channel.write(offset: 0, data: DataChunk(log.header(index)) + payload, queue: queue) { done, _, error in
                if done, let error { failure.withLock { $0 = $0 ?? "write of record \(index): \(error)" } }
            }
        }
        let synced = Completion()
        channel.barrier {
            synced.finish(fsync(fd) == 0 ? nil : "fsync: errno \(errno)")
        }
        try synced.wait("RingIO append log", timeout: timeout)
        let elapsed = seconds(since: start)
        channel.close()
        try closed.wait("RingIO cleanup handler", timeout: timeout)
        if let error = failure.withLock({ $0 }) { throw BenchError("RingIO append log: \(error)") }
        return elapsed
    }

    /// Each record awaited through `write(data:)` on a stream path channel, then `synchronize()`.
    static func appendLogAsync(_ path: String, log: AppendLog, timeout: Double) throws -> Double {
        try blocking("RingIO async append log", timeout: timeout) {
            let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .writeOnly,
                                        options: [.create, .truncate], permissions: .ownerReadWrite, queue: .global)
            defer { channel.close() }
            let payload = DataChunk(log.payload)
            let start = now()
            for index in 0..<log.records {
                try await channel.write(data: DataChunk(log.header(index)) + payload)
            }
            try await channel.synchronize()
            return seconds(since: start)
        }
    }
}
