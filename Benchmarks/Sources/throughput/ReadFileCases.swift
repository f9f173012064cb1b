// The small-file read workload: `options.files` files of 12 KiB, each read
// whole, one after another (no file overlaps the next), by `IO.readFile`
// from a plain task and from a task on the engine's ring queue, by
// Foundation's `Data(contentsOf:)` and by an open/fstat/read/close loop.
// Every file's bytes go into a checksum compared with the one taken when
// the files were written.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import FoundationEssentials
import RingIO
import SystemPackage

/// The size of each file of the `readfile` workload.
let readFileSize = 12 << 10

/// A position-dependent checksum of the files read (the index of each file mixed in).
struct FileSums {
    private(set) var value: UInt64 = 0

    mutating func add(_ bytes: UnsafeRawBufferPointer, file index: Int) {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325 &+ UInt64(index)
        var i = 0
        while i + 8 <= bytes.count {
            h = (h ^ bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* 0x100_0000_01b3
            i += 8
        }
        while i < bytes.count {
            h = (h ^ UInt64(bytes[i])) &* 0x100_0000_01b3
            i += 1
        }
        value &+= h ^ UInt64(bytes.count)
    }
}

enum ReadFileCases {
    /// Writes the files and returns their checksum.
    static func generate(_ dir: String, count: Int) throws -> UInt64 {
        try generateSmallFiles(dir, count: count, size: readFileSize)
        return try plain(dir, count: count).sums
    }

    /// `IO.readFile` of each file in turn, from a plain task, or (`onRing`)
    /// from a task whose executor preference is the engine's ring queue.
    static func ringio(_ dir: String, count: Int, onRing: Bool, timeout: Double) throws -> (seconds: Double, sums: UInt64) {
        try blocking("RingIO IO.readFile × \(count)", timeout: timeout) {
            let body: @Sendable () async throws -> (Double, UInt64) = {
                var sums = FileSums()
                let start = now()
                for i in 0..<count {
                    let chunk = try await IO.readFile(at: FilePath(smallFilePath(dir, i)))
                    guard chunk.count == readFileSize else { throw BenchError("IO.readFile: \(chunk.count) bytes of file \(i)") }
                    chunk.withUnsafeBytes { sums.add($0, file: i) }
                }
                return (seconds(since: start), sums.value)
            }
            if onRing { return try await withTaskExecutorPreference(IOEngine.shared.queue) { try await body() } }
            return try await body()
        }
    }

    /// Drops the files' pages from the page cache (`--evict-pages`); their
    /// paths stay cached. Checks that they went (mincore), since
    /// `POSIX_FADV_DONTNEED` skips dirty pages.
    static func evictPages(_ dir: String, count: Int) throws {
        sync()
        for i in 0..<count {
            let fd = try openFile(smallFilePath(dir, i), O_RDONLY)
            defer { close(fd) }
            let rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
            guard rc == 0 else { throw BenchError("posix_fadvise: errno \(rc)") }
        }
        let left = try (0..<count).reduce(0.0) { $0 + (try residentFraction(smallFilePath(dir, $1))) }
        guard left < Double(count) / 2 else { throw BenchError("--evict-pages: most pages stayed cached") }
    }

    /// `Data(contentsOf:)` of each file in turn.
    static func foundation(_ dir: String, count: Int) throws -> (seconds: Double, sums: UInt64) {
        var sums = FileSums()
        let start = now()
        for i in 0..<count {
            let data = try Data(contentsOf: URL(fileURLWithPath: smallFilePath(dir, i)))
            guard data.count == readFileSize else { throw BenchError("Data(contentsOf:): \(data.count) bytes of file \(i)") }
            data.withUnsafeBytes { sums.add($0, file: i) }
        }
        return (seconds(since: start), sums.value)
    }

    /// open, fstat, read (to EOF), close for each file in turn, into a new buffer each.
    static func plain(_ dir: String, count: Int) throws -> (seconds: Double, sums: UInt64) {
        var sums = FileSums()
        let start = now()
        for i in 0..<count {
            let fd = try openFile(smallFilePath(dir, i), O_RDONLY)
            var st = stat()
            guard fstat(fd, &st) == 0 else { close(fd); throw BenchError("fstat: errno \(errno)") }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(st.st_size) + 1, alignment: 16)
            defer { buffer.deallocate() }
            var total = 0
            while true {
                let n = read(fd, buffer.baseAddress! + total, buffer.count - total)
                if n < 0 { close(fd); throw BenchError("read: errno \(errno)") }
                if n == 0 || total + n == buffer.count { total += n; break }
                total += n
            }
            close(fd)
            guard total == readFileSize else { throw BenchError("read loop: \(total) bytes of file \(i)") }
            sums.add(UnsafeRawBufferPointer(rebasing: buffer[0..<total]), file: i)
        }
        return (seconds(since: start), sums.value)
    }
}
