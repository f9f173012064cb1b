// SwiftNIO's two file APIs: the async `_NIOFileSystem` (NIOFS: `FileSystem`,
// file handles, chunk sequences) and NIOPosix's `NonBlockingFileIO` (blocking
// system calls on a thread pool, results as futures or async).
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import NIOCore
import NIOPosix
import _NIOFileSystem

// MARK: - _NIOFileSystem

enum NIOCases {
    static func sequentialRead(_ path: String, size: Int, expected: UInt64, timeout: Double) throws -> Sample {
        let (bytes, checksum, elapsed) = try blocking("NIO readChunks", timeout: timeout) {
            let start = now()
            let (bytes, checksum) = try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(path)) { handle in
                var checksum = StreamChecksum()
                for try await chunk in handle.readChunks(chunkLength: .mebibytes(1)) {
                    chunk.withUnsafeReadableBytes { checksum.add($0) }
                }
                return (checksum.position, checksum.value)
            }
            return (bytes, checksum, seconds(since: start))
        }
        guard bytes == size else { throw BenchError("NIO read \(bytes) of \(size) bytes") }
        try requireChecksum("NIO readChunks", checksum, expected)
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

    /// `FileSystem.copyItem`: sendfile(2) for a file; for a directory, its
    /// own parallel walk.
    static func copyItem(_ source: String, _ destination: String, timeout: Double) throws {
        try blocking("NIO copyItem", timeout: timeout) {
            try await FileSystem.shared.copyItem(at: FilePath(source), to: FilePath(destination))
        }
    }

    /// `depth` tasks, each awaiting `readChunk(fromAbsoluteOffset:length:)` in turn.
    static func randomReads(_ path: String, offsets: [Int64], depth: Int, expected: UInt64, timeout: Double) throws -> Sample {
        let checksums = ReadChecksums()
        let elapsed = try blocking("NIO random reads", timeout: timeout) {
            try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(path)) { handle in
                let start = now()
                try await inFlight(count: offsets.count, depth: depth) { _, i in
                    let chunk = try await handle.readChunk(fromAbsoluteOffset: offsets[i], length: .bytes(4096))
                    guard chunk.readableBytes == 4096 else { throw BenchError("NIO read \(chunk.readableBytes) bytes at \(offsets[i])") }
                    chunk.withUnsafeReadableBytes { checksums.add($0, at: offsets[i]) }
                }
                return seconds(since: start)
            }
        }
        try requireChecksum("NIO random reads", checksums.value, expected)
        return Sample(rate: Double(offsets.count) / elapsed, note: "\(offsets.count) reads")
    }

    /// Each record a ByteBuffer awaited through `write(contentsOf:toAbsoluteOffset:)`, then `synchronize()`.
    static func appendLog(_ path: String, log: AppendLog, timeout: Double) throws -> Double {
        try blocking("NIO append log", timeout: timeout) {
            try await FileSystem.shared.withFileHandle(
                forWritingAt: FilePath(path), options: .newFile(replaceExisting: true)
            ) { handle in
                let start = now()
                for index in 0..<log.records {
                    var record = ByteBuffer()
                    record.reserveCapacity(log.recordSize)
                    record.writeInteger(UInt64(index), endianness: .little)
                    record.writeBytes(log.payload)
                    try await handle.write(contentsOf: record, toAbsoluteOffset: Int64(index * log.recordSize))
                }
                try await handle.synchronize()
                return seconds(since: start)
            }
        }
    }
}

// MARK: - NIOPosix NonBlockingFileIO

enum NonBlockingFileIOCases {
    static let fileIO = NonBlockingFileIO(threadPool: .singleton)

    /// `NIOFileHandle` is deprecated going forward (not marked yet); this is
    /// how its users open one without the deprecated path initializers.
    private static func handle(_ path: String, _ flags: Int32) throws -> NIOFileHandle {
        NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: try openFile(path, flags))
    }

    /// `readChunked` in 1 MiB chunks, the handler called on an event loop.
    static func sequentialRead(_ path: String, size: Int, expected: UInt64, timeout: Double) throws -> Sample {
        let file = try handle(path, O_RDONLY)
        defer { try? file.close() }
        let checksum = SharedStreamChecksum()
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        let start = now()
        try fileIO.readChunked(fileHandle: file, fromOffset: 0, byteCount: size, chunkSize: 1 << 20,
                               allocator: ByteBufferAllocator(), eventLoop: eventLoop) { chunk in
            chunk.withUnsafeReadableBytes { checksum.add($0) }
            return eventLoop.makeSucceededVoidFuture()
        }.wait()
        let elapsed = seconds(since: start)
        guard checksum.bytes == size else { throw BenchError("NonBlockingFileIO read \(checksum.bytes) of \(size) bytes") }
        try requireChecksum("NonBlockingFileIO readChunked", checksum.value, expected)
        return Sample(rate: Double(size) / elapsed)
    }

    /// `readChunked` in 1 MiB chunks, each handler returning the future of its chunk's write.
    static func copy(_ source: String, _ destination: String, timeout: Double) throws {
        let input = try handle(source, O_RDONLY)
        defer { try? input.close() }
        let output = try handle(destination, O_WRONLY | O_CREAT | O_TRUNC)
        defer { try? output.close() }
        guard let size = fileSize(source) else { throw BenchError("cannot stat \(source)") }
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        try fileIO.readChunked(fileHandle: input, fromOffset: 0, byteCount: size, chunkSize: 1 << 20,
                               allocator: ByteBufferAllocator(), eventLoop: eventLoop) { chunk in
            fileIO.write(fileHandle: output, buffer: chunk, eventLoop: eventLoop)
        }.wait()
    }

    /// `depth` tasks, each awaiting `read(fileHandle:fromOffset:byteCount:allocator:)`
    /// in turn on its own handle (a `NIOFileHandle` refuses concurrent use: EBUSY).
    static func randomReads(_ path: String, offsets: [Int64], depth: Int, expected: UInt64, timeout: Double) throws -> Sample {
        let files = try (0..<depth).map { _ in try handle(path, O_RDONLY) }
        defer { for file in files { try? file.close() } }
        let checksums = ReadChecksums()
        let elapsed = try blocking("NonBlockingFileIO random reads", timeout: timeout) {
            let start = now()
            try await inFlight(count: offsets.count, depth: depth) { worker, i in
                let chunk = try await fileIO.read(fileHandle: files[worker], fromOffset: offsets[i], byteCount: 4096,
                                                  allocator: ByteBufferAllocator())
                guard chunk.readableBytes == 4096 else { throw BenchError("read \(chunk.readableBytes) bytes at \(offsets[i])") }
                chunk.withUnsafeReadableBytes { checksums.add($0, at: offsets[i]) }
            }
            return seconds(since: start)
        }
        try requireChecksum("NonBlockingFileIO random reads", checksums.value, expected)
        return Sample(rate: Double(offsets.count) / elapsed, note: "\(offsets.count) reads")
    }

    /// Each record a ByteBuffer awaited through `write(fileHandle:toOffset:buffer:)`, then fsync on the pool.
    static func appendLog(_ path: String, log: AppendLog, timeout: Double) throws -> Double {
        let file = try handle(path, O_WRONLY | O_CREAT | O_TRUNC)
        defer { try? file.close() }
        return try blocking("NonBlockingFileIO append log", timeout: timeout) {
            let start = now()
            for index in 0..<log.records {
                var record = ByteBuffer()
                record.reserveCapacity(log.recordSize)
                record.writeInteger(UInt64(index), endianness: .little)
                record.writeBytes(log.payload)
                try await fileIO.write(fileHandle: file, toOffset: Int64(index * log.recordSize), buffer: record)
            }
            try await NIOThreadPool.singleton.runIfActive {
                try file.withUnsafeFileDescriptor { fd in
                    guard fsync(fd) == 0 else { throw BenchError("fsync: errno \(errno)") }
                }
            }
            return seconds(since: start)
        }
    }
}
