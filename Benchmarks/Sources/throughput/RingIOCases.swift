// RingIO's side: IOChannel through its handler API, shaped like the DispatchIO
// anchors so that the two compare operation for operation.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import RingIO
import SystemPackage

enum RingIOCases {
    static var engineDescription: String {
        let engine = IOEngine.shared
        return "\(engine.backend)" + (engine.fallbackReason.map { " (fallback: \($0))" } ?? "")
    }

    static func sequentialRead(_ path: String, size: Int, timeout: Double) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        let queue = IOQueue(label: "throughput.read")
        let closed = Completion()
        let channel = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: fd), queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let tally = Tally()
        let done = Completion()
        let start = now()
        channel.read(offset: 0, length: .max, queue: queue) { isDone, data, error in
            tally.add(data?.count ?? 0)
            if isDone { done.finish(error.map { "read ended with \($0)" }) }
        }
        try done.wait("RingIO stream read", timeout: timeout) { tally.summary }
        let elapsed = seconds(since: start)
        channel.close()
        try closed.wait("RingIO cleanup handler", timeout: timeout)
        guard tally.bytes == size else { throw BenchError("RingIO read \(tally.bytes) of \(size) bytes (\(tally.summary))") }
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

    static func randomReads(_ path: String, offsets: [Int64], depth: Int, timeout: Double) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        let queue = IOQueue(label: "throughput.random")
        let closed = Completion()
        let channel = IOChannel(kind: .random, fileDescriptor: FileDescriptor(rawValue: fd), queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let loop = RandomReadLoop(offsets: offsets) { offset, finished in
            let tally = Tally()
            channel.read(offset: offset, length: 4096, queue: queue) { done, data, error in
                let seen = tally.add(data?.count ?? 0)
                if done { finished(seen.bytes, seen.calls, error.map { "\($0)" }) }
            }
        }
        let result = try loop.run(depth: depth, what: "RingIO random reads", timeout: timeout)
        channel.close()
        try closed.wait("RingIO cleanup handler", timeout: timeout)
        return Sample(rate: result.rate, note: "\(offsets.count) reads, \(fixed(result.callsPerRead, 2)) handler calls per read")
    }
}
