// The anchors: the same work done with Dispatch's DispatchIO and with plain
// blocking system calls (SwiftNIO: NIOCases.swift; fio: Fio.swift).
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import Dispatch
import Synchronization

/// Bytes the copy's read handler may have handed to the write channel and not yet seen written.
let copyWindowBytes = 8 << 20

/// How many 4 KiB reads (or files) a random-read (small-file) job keeps in flight at most.
let filesInFlight = 32

// MARK: - DispatchIO

enum DispatchIOCases {
    static func sequentialRead(_ path: String, size: Int, expected: UInt64, timeout: Double) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        let queue = DispatchQueue(label: "throughput.read")
        let closed = Completion()
        let channel = DispatchIO(type: .stream, fileDescriptor: fd, queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let tally = Tally()
        let checksum = SharedStreamChecksum()
        let done = Completion()
        let start = now()
        channel.read(offset: 0, length: Int.max, queue: queue) { isDone, data, error in
            tally.add(data?.count ?? 0)
            data?.enumerateBytes { bytes, _, _ in checksum.add(UnsafeRawBufferPointer(bytes)) }
            if isDone { done.finish(error == 0 ? nil : "read ended with errno \(error)") }
        }
        try done.wait("DispatchIO stream read", timeout: timeout) { tally.summary }
        let elapsed = seconds(since: start)
        channel.close()
        try closed.wait("DispatchIO cleanup handler", timeout: timeout)
        guard tally.bytes == size else { throw BenchError("DispatchIO read \(tally.bytes) of \(size) bytes") }
        try requireChecksum("DispatchIO stream read", checksum.value, expected)
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

    static func randomReads(_ path: String, offsets: [Int64], depth: Int, expected: UInt64, timeout: Double) throws -> Sample {
        // The fd is at 0: DispatchIO adds its position at creation to random offsets.
        let fd = try openFile(path, O_RDONLY)
        let queue = DispatchQueue(label: "throughput.random")
        let closed = Completion()
        let channel = DispatchIO(type: .random, fileDescriptor: fd, queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let checksums = ReadChecksums()
        let calls = Counter()
        let loop = InFlightLoop(count: offsets.count) { i, finished in
            let offset = offsets[i]
            let tally = Tally()
            channel.read(offset: off_t(offset), length: 4096, queue: queue) { done, data, error in
                _ = calls.take()
                let seen = tally.add(data?.count ?? 0)
                let before = seen.bytes - (data?.count ?? 0)
                data?.enumerateBytes { bytes, at, _ in checksums.add(UnsafeRawBufferPointer(bytes), at: offset, from: before + at) }
                if done { finished(seen.bytes == 4096 && error == 0 ? nil : "read at \(offset): \(seen.bytes) bytes, errno \(error)") }
            }
        }
        let elapsed = try loop.run(depth: depth, what: "DispatchIO random reads", timeout: timeout)
        channel.close()
        try closed.wait("DispatchIO cleanup handler", timeout: timeout)
        try requireChecksum("DispatchIO random reads", checksums.value, expected)
        return Sample(rate: Double(offsets.count) / elapsed,
                      note: "\(offsets.count) reads, \(fixed(Double(calls.taken) / Double(offsets.count), 2)) handler calls per read")
    }

    /// Each file read whole with `DispatchIO.read(fromFileDescriptor:)`, then
    /// written with `DispatchIO.write(toFileDescriptor:)`, `filesInFlight` at once.
    static func copyFiles(_ source: String, _ destination: String, count: Int, timeout: Double) throws -> Double {
        let queue = DispatchQueue(label: "throughput.files", attributes: .concurrent)
        let loop = InFlightLoop(count: count) { i, finished in
            let input: Int32, output: Int32
            do {
                input = try openFile(smallFilePath(source, i), O_RDONLY)
                output = try openFile(smallFilePath(destination, i), O_WRONLY | O_CREAT | O_TRUNC)
            } catch {
                return finished("\(error)")
            }
            DispatchIO.read(fromFileDescriptor: input, maxLength: Int.max, runningHandlerOn: queue) { data, error in
                close(input)
                guard error == 0 else { close(output); return finished("read errno \(error)") }
                DispatchIO.write(toFileDescriptor: output, data: data, runningHandlerOn: queue) { _, error in
                    close(output)
                    finished(error == 0 ? nil : "write errno \(error)")
                }
            }
        }
        return try loop.run(depth: filesInFlight, what: "DispatchIO file copies", timeout: timeout)
    }

    /// Every record handed to a stream write channel at once (the channel
    /// queues them), then a barrier that calls fsync.
    static func appendLog(_ path: String, log: AppendLog, timeout: Double) throws -> Double {
        let fd = try openFile(path, O_WRONLY | O_CREAT | O_TRUNC)
        let queue = DispatchQueue(label: "throughput.append")
        let closed = Completion()
        let channel = DispatchIO(type: .stream, fileDescriptor: fd, queue: queue) { _ in
            close(fd)
            closed.finish()
        }
        let payload = log.payload.withUnsafeBytes { DispatchData(bytes: $0) }
        let failure = Mutex<String?>(nil)
        let start = now()
        for index in 0..<log.records {
            var record = log.header(index).withUnsafeBytes { DispatchData(bytes: $0) }
            record.append(payload)
            channel.write(offset: 0, data: record, queue: queue) { done, _, error in
                if done && error != 0 { failure.withLock { $0 = $0 ?? "write of record \(index): errno \(error)" } }
            }
        }
        let synced = Completion()
        channel.barrier {
            synced.finish(fsync(fd) == 0 ? nil : "fsync: errno \(errno)")
        }
        try synced.wait("DispatchIO append log", timeout: timeout)
        let elapsed = seconds(since: start)
        channel.close()
        try closed.wait("DispatchIO cleanup handler", timeout: timeout)
        if let error = failure.withLock({ $0 }) { throw BenchError("DispatchIO append log: \(error)") }
        return elapsed
    }
}

// MARK: - plain blocking system calls

enum PlainCases {
    static func sequentialRead(_ path: String, size: Int, expected: UInt64) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 4096)
        defer { buffer.deallocate() }
        var checksum = StreamChecksum()
        let start = now()
        while true {
            let n = read(fd, buffer.baseAddress, blockSize)
            guard n >= 0 else { throw BenchError("read: errno \(errno)") }
            if n == 0 { break }
            checksum.add(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
        let elapsed = seconds(since: start)
        guard checksum.position == size else { throw BenchError("read(2) loop read \(checksum.position) of \(size) bytes") }
        try requireChecksum("read(2) loop", checksum.value, expected)
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
            try writeAll(output, UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    /// One pread at a time.
    static func randomReads(_ path: String, offsets: [Int64], expected: UInt64) throws -> Sample {
        let fd = try openFile(path, O_RDONLY)
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 4096)
        defer { buffer.deallocate() }
        var checksum: UInt64 = 0
        let start = now()
        for offset in offsets {
            guard pread(fd, buffer.baseAddress, 4096, off_t(offset)) == 4096 else {
                throw BenchError("pread at \(offset): errno \(errno)")
            }
            checksum &+= readChecksum(UnsafeRawBufferPointer(buffer), at: offset)
        }
        let elapsed = seconds(since: start)
        try requireChecksum("pread loop", checksum, expected)
        return Sample(rate: Double(offsets.count) / elapsed, note: "\(offsets.count) reads")
    }

    /// open, read, write, close, one file after the other.
    static func copyFiles(_ source: String, _ destination: String, count: Int) throws -> Double {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 4096)
        defer { buffer.deallocate() }
        let start = now()
        for i in 0..<count {
            let input = try openFile(smallFilePath(source, i), O_RDONLY)
            defer { close(input) }
            let output = try openFile(smallFilePath(destination, i), O_WRONLY | O_CREAT | O_TRUNC)
            defer { close(output) }
            while true {
                let n = read(input, buffer.baseAddress, buffer.count)
                guard n >= 0 else { throw BenchError("read: errno \(errno)") }
                if n == 0 { break }
                try writeAll(output, UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            }
        }
        return seconds(since: start)
    }

    /// write(2) per record from one buffer, then fsync.
    static func appendLog(_ path: String, log: AppendLog) throws -> Double {
        let fd = try openFile(path, O_WRONLY | O_CREAT | O_TRUNC)
        defer { close(fd) }
        var record = log.header(0) + log.payload
        let start = now()
        for index in 0..<log.records {
            try record.withUnsafeMutableBytes { bytes in
                bytes.storeBytes(of: UInt64(index).littleEndian, as: UInt64.self)
                try writeAll(fd, UnsafeRawBufferPointer(bytes))
            }
        }
        guard fsync(fd) == 0 else { throw BenchError("fsync: errno \(errno)") }
        return seconds(since: start)
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        var done = 0
        while done < bytes.count {
            let w = write(fd, bytes.baseAddress! + done, bytes.count - done)
            guard w > 0 else { throw BenchError("write: errno \(errno)") }
            done += w
        }
    }
}
