// The anchors: the same work done with Dispatch's DispatchIO, SwiftNIO's
// file system, plain blocking system calls, cp and fio.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import Dispatch
import Synchronization
import NIOCore
import _NIOFileSystem

/// One measurement: a rate (bytes/s or reads/s) and what the run noticed.
struct Sample {
    var rate: Double
    var note: String? = nil
}

/// Bytes the copy's read handler may have handed to the write channel and not yet seen written.
let copyWindowBytes = 8 << 20

// MARK: - random reads, any system

/// Keeps `depth` 4 KiB reads in flight until every offset is read: `issue`
/// starts one read and calls back once, when it is done, with the bytes and
/// handler calls it took.
final class RandomReadLoop: Sendable {
    typealias Finished = @Sendable (_ bytes: Int, _ calls: Int, _ error: String?) -> Void
    let offsets: [Int64]
    private let issue: @Sendable (Int64, @escaping Finished) -> Void
    private let next = Atomic<Int>(0)
    private let completed = Atomic<Int>(0)
    private let calls = Atomic<Int>(0)
    private let completion = Completion()

    init(offsets: [Int64], issue: @escaping @Sendable (Int64, @escaping Finished) -> Void) {
        self.offsets = offsets
        self.issue = issue
    }

    /// Returns reads/s and handler calls per read.
    func run(depth: Int, what: String, timeout: Double) throws -> (rate: Double, callsPerRead: Double) {
        let start = now()
        for _ in 0..<min(depth, offsets.count) { startOne() }
        try completion.wait(what, timeout: timeout) {
            "\(completed.load(ordering: .relaxed)) of \(offsets.count) reads done, \(next.load(ordering: .relaxed)) issued"
        }
        let elapsed = seconds(since: start)
        return (Double(offsets.count) / elapsed, Double(calls.load(ordering: .relaxed)) / Double(offsets.count))
    }

    private func startOne() {
        let i = next.wrappingAdd(1, ordering: .relaxed).oldValue
        guard i < offsets.count else { return }
        let offset = offsets[i]
        issue(offset) { [self] bytes, calls, error in
            if error != nil || bytes != 4096 {
                completion.finish("read of 4096 bytes at offset \(offset) ended with \(bytes) bytes, error \(error ?? "nil")")
                return
            }
            self.calls.wrappingAdd(calls, ordering: .relaxed)
            if completed.wrappingAdd(1, ordering: .relaxed).newValue == offsets.count {
                completion.finish()
            } else {
                startOne()
            }
        }
    }
}

// MARK: - DispatchIO

enum DispatchIOCases {
    static func sequentialRead(_ path: String, size: Int, timeout: Double) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        let queue = DispatchQueue(label: "throughput.read")
        let closed = Completion()
        let channel = DispatchIO(type: .stream, fileDescriptor: fd, queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let tally = Tally()
        let done = Completion()
        let start = now()
        channel.read(offset: 0, length: Int.max, queue: queue) { isDone, data, error in
            tally.add(data?.count ?? 0)
            if isDone { done.finish(error == 0 ? nil : "read ended with errno \(error)") }
        }
        try done.wait("DispatchIO stream read", timeout: timeout) { tally.summary }
        let elapsed = seconds(since: start)
        channel.close()
        try closed.wait("DispatchIO cleanup handler", timeout: timeout)
        guard tally.bytes == size else { throw BenchError("DispatchIO read \(tally.bytes) of \(size) bytes") }
        return Sample(rate: Double(size) / elapsed, note: "\(tally.calls) handler calls, largest delivery \(tally.largest >> 10) KiB")
    }

    /// A stream read channel whose handler writes each delivered chunk to a
    /// stream write channel, at most `copyWindowBytes` outstanding.
    static func copy(_ source: String, _ destination: String, timeout: Double) throws {
        let input = try openFile(source, O_RDONLY)
        let output = try openFile(destination, O_WRONLY | O_CREAT | O_TRUNC)
        let readQueue = DispatchQueue(label: "throughput.copy.read")
        let writeQueue = DispatchQueue(label: "throughput.copy.write")
        let readerClosed = Completion(), writerClosed = Completion()
        let reader = DispatchIO(type: .stream, fileDescriptor: input, queue: readQueue) { _ in
            close(input)
            readerClosed.finish()
        }
        let writer = DispatchIO(type: .stream, fileDescriptor: output, queue: writeQueue) { _ in
            close(output)
            writerClosed.finish()
        }
        let window = WriteWindow(limit: copyWindowBytes)
        let tally = Tally()
        let readDone = Completion()
        reader.read(offset: 0, length: Int.max, queue: readQueue) { isDone, data, error in
            if let data, !data.isEmpty {
                let count = data.count
                tally.add(count)
                window.acquire(count)
                writer.write(offset: 0, data: data, queue: writeQueue) { writeDone, _, writeError in
                    if writeDone { window.release(count, error: writeError == 0 ? nil : "write errno \(writeError)") }
                }
            }
            if isDone { readDone.finish(error == 0 ? nil : "read ended with errno \(error)") }
        }
        try readDone.wait("DispatchIO copy read", timeout: timeout) { tally.summary }
        try window.drain("DispatchIO copy writes", timeout: timeout)
        reader.close()
        writer.close()
        try readerClosed.wait("DispatchIO copy: reader cleanup", timeout: timeout)
        try writerClosed.wait("DispatchIO copy: writer cleanup", timeout: timeout)
    }

    static func randomReads(_ path: String, offsets: [Int64], depth: Int, timeout: Double) throws -> Sample {
        // The fd is at 0: DispatchIO adds its position at creation to random offsets.
        let fd = try openFile(path, O_RDONLY)
        let queue = DispatchQueue(label: "throughput.random")
        let closed = Completion()
        let channel = DispatchIO(type: .random, fileDescriptor: fd, queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let loop = RandomReadLoop(offsets: offsets) { offset, finished in
            let tally = Tally()
            channel.read(offset: off_t(offset), length: 4096, queue: queue) { done, data, error in
                let seen = tally.add(data?.count ?? 0)
                if done { finished(seen.bytes, seen.calls, error == 0 ? nil : "errno \(error)") }
            }
        }
        let result = try loop.run(depth: depth, what: "DispatchIO random reads", timeout: timeout)
        channel.close()
        try closed.wait("DispatchIO cleanup handler", timeout: timeout)
        return Sample(rate: result.rate, note: "\(offsets.count) reads, \(fixed(result.callsPerRead, 2)) handler calls per read")
    }
}

// MARK: - SwiftNIO (_NIOFileSystem)

enum NIOCases {
    static func sequentialRead(_ path: String, size: Int, timeout: Double) throws -> Sample {
        let (bytes, elapsed) = try blocking("NIO readChunks", timeout: timeout) {
            let start = now()
            let bytes = try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(path)) { handle in
                var total = 0
                for try await chunk in handle.readChunks(chunkLength: .mebibytes(1)) {
                    total += chunk.readableBytes
                }
                return total
            }
            return (bytes, seconds(since: start))
        }
        guard bytes == size else { throw BenchError("NIO read \(bytes) of \(size) bytes") }
        return Sample(rate: Double(size) / elapsed)
    }

    /// readChunks from the source, each chunk written at its offset in the destination.
    static func copyChunks(_ source: String, _ destination: String, timeout: Double) throws {
        try blocking("NIO readChunks → write", timeout: timeout) {
            try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(source)) { input in
                try await FileSystem.shared.withFileHandle(
                    forWritingAt: FilePath(destination), options: .newFile(replaceExisting: true)
                ) { output in
                    var offset: Int64 = 0
                    for try await chunk in input.readChunks(chunkLength: .mebibytes(1)) {
                        try await output.write(contentsOf: chunk, toAbsoluteOffset: offset)
                        offset += Int64(chunk.readableBytes)
                    }
                }
            }
        }
    }

    /// `FileSystem.copyItem`: sendfile(2) on Linux.
    static func copyItem(_ source: String, _ destination: String, timeout: Double) throws {
        try blocking("NIO copyItem", timeout: timeout) {
            try await FileSystem.shared.copyItem(at: FilePath(source), to: FilePath(destination))
        }
    }
}

// MARK: - plain blocking system calls

enum PlainCases {
    static func sequentialRead(_ path: String, size: Int) throws -> Sample {
        let start = now()
        let bytes = try readThrough(path)
        let elapsed = seconds(since: start)
        guard bytes == size else { throw BenchError("read(2) loop read \(bytes) of \(size) bytes") }
        return Sample(rate: Double(size) / elapsed)
    }

    static func copy(_ source: String, _ destination: String) throws {
        let input = try openFile(source, O_RDONLY)
        defer { close(input) }
        let output = try openFile(destination, O_WRONLY | O_CREAT | O_TRUNC)
        defer { close(output) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 4096)
        defer { buffer.deallocate() }
        while true {
            let n = read(input, buffer.baseAddress, blockSize)
            guard n >= 0 else { throw BenchError("read: errno \(errno)") }
            if n == 0 { return }
            var done = 0
            while done < n {
                let w = write(output, buffer.baseAddress! + done, n - done)
                guard w > 0 else { throw BenchError("write: errno \(errno)") }
                done += w
            }
        }
    }

    /// One pread at a time (queue depth 1).
    static func randomReads(_ path: String, offsets: [Int64]) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 4096)
        defer { buffer.deallocate() }
        let start = now()
        for offset in offsets {
            guard pread(fd, buffer.baseAddress, 4096, off_t(offset)) == 4096 else {
                throw BenchError("pread at \(offset): errno \(errno)")
            }
        }
        return Sample(rate: Double(offsets.count) / seconds(since: start), note: "\(offsets.count) reads")
    }
}
