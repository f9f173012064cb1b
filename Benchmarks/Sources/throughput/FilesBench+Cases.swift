// throughput files: the RingIO rows, the plain system-call and command-line
// peers, and the inputs (FilesBench.swift).
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
@_spi(Engine) import RingIO
import SystemPackage

extension FilesBench {
    // MARK: - inputs

    static func make(_ path: String) throws {
        guard mkdir(path, 0o755) == 0 || errno == EEXIST else { throw BenchError("mkdir \(path): errno \(errno)") }
    }

    static func touch(_ path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw BenchError("create \(path): errno \(errno)") }
        close(fd)
    }

    static func exists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }

    /// 10,000 empty files in 100 directories, for one removal.
    static func makeDoomed(_ root: String) throws {
        if exists(root) { _ = try spawn(["/bin/rm", "-rf", root], timeout: 600) }
        try make(root)
        for d in 0..<100 {
            try make(root + "/d\(d)")
            for f in 0..<100 { try touch(root + "/d\(d)/f\(f)") }
        }
    }

    /// `mib` MiB of lines of 0–120 printable bytes; the line count and the
    /// bytes in lines (without their newlines).
    static func writeText(_ path: String, mib: Int) throws -> (lines: Int, bytes: Int) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw BenchError("create \(path): errno \(errno)") }
        defer { close(fd) }
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        var block: [UInt8] = []
        block.reserveCapacity(1 << 20)
        var lines = 0, bytes = 0, written = 0
        while written < mib << 20 {
            block.removeAll(keepingCapacity: true)
            while block.count < (1 << 20) - 128 {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17
                let length = Int(x % 121)
                for i in 0..<length { block.append(UInt8(truncatingIfNeeded: 0x21 &+ (Int(x >> 8) &+ i) % 94)) }
                block.append(0x0A)
                lines += 1
                bytes += length
            }
            guard write(fd, block, block.count) == block.count else { throw BenchError("write \(path): errno \(errno)") }
            written += block.count
        }
        return (lines, bytes)
    }

    /// The size of each file of the read tree.
    static let readTreeFileSize = 4096

    /// 10,000 files of 4 KiB of distinct bytes in 100 directories; their
    /// checksum.
    static func makeReadTree(_ root: String) throws -> Int {
        try make(root)
        var bytes = [UInt64](repeating: 0, count: readTreeFileSize / 8)
        var x: UInt64 = 0x0123_4567_89AB_CDEF
        var sum = 0
        for d in 0..<100 {
            try make(root + "/d\(d)")
            for f in 0..<100 {
                for j in bytes.indices {
                    x ^= x << 13; x ^= x >> 7; x ^= x << 17
                    bytes[j] = x
                }
                let path = root + "/d\(d)/f\(f)"
                let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
                guard fd >= 0 else { throw BenchError("create \(path): errno \(errno)") }
                defer { close(fd) }
                let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                guard n == readTreeFileSize else { throw BenchError("write \(path): errno \(errno)") }
                sum &+= bytes.withUnsafeBytes { fileSum($0) }
            }
        }
        return sum
    }

    /// One file's checksum; a tree's is the sum of its files' (in any order).
    static func fileSum(_ bytes: UnsafeRawBufferPointer) -> Int {
        var sums = FileSums()
        sums.add(bytes, file: 0)
        return Int(truncatingIfNeeded: sums.value)
    }

    static func readTreeRingIO(_ root: String) throws -> Int {
        try blocking("RingIO read tree", timeout: 300) {
            var sum = 0
            for try await entry in IO.directoryEntries(at: FilePath(root), recursive: true) where entry.type == .regular {
                sum &+= try await IO.readFile(at: entry.path).withUnsafeBytes { fileSum($0) }
            }
            return sum
        }
    }

    static func readTreeRingIOConcurrent(_ root: String) throws -> Int {
        try blocking("RingIO read tree, 16 at a time", timeout: 300) {
            try await withThrowingTaskGroup(of: Int.self) { group in
                var sum = 0, running = 0
                for try await entry in IO.directoryEntries(at: FilePath(root), recursive: true) where entry.type == .regular {
                    if running == 16, let one = try await group.next() {
                        sum &+= one
                        running -= 1
                    }
                    let path = entry.path
                    group.addTask { try await IO.readFile(at: path).withUnsafeBytes { fileSum($0) } }
                    running += 1
                }
                while let one = try await group.next() { sum &+= one }
                return sum
            }
        }
    }

    // MARK: - list

    static func countRingIO(_ tree: String) throws -> Int {
        try blocking("RingIO directoryEntries", timeout: 120) {
            var n = 0
            for try await entry in IO.directoryEntries(at: FilePath(tree), recursive: true) where entry.type == .regular {
                n += 1
            }
            return n
        }
    }

    static func countRingIOBatched(_ tree: String) throws -> Int {
        try blocking("RingIO directoryEntries batched", timeout: 120) {
            var n = 0
            for try await batch in IO.directoryEntries(at: FilePath(tree), recursive: true).batched() {
                for entry in batch where entry.type == .regular { n += 1 }
            }
            return n
        }
    }

    static func countFind(_ tree: String) throws -> Int {
        let child = try spawn(["/bin/sh", "-c", "find '\(tree)' -type f | wc -l"], timeout: 120)
        guard child.status == 0 else { throw BenchError("find: status \(child.status)") }
        return Int(child.output.trimmingCharacters(in: " \n")) ?? -1
    }

    // MARK: - info

    static func infoRingIO(_ paths: [String]) throws -> Int {
        try blocking("RingIO info", timeout: 120) {
            var n = 0
            for path in paths where try await IO.info(at: FilePath(path)).type == .regular { n += 1 }
            return n
        }
    }

    static func infoRingIORing(_ paths: [String]) throws -> Int {
        try blocking("RingIO info through the ring", timeout: 120) {
            var n = 0
            for path in paths where try await IO.info(at: FilePath(path), engine: .shared).type == .regular { n += 1 }
            return n
        }
    }

    static func infoRingIOConcurrent(_ paths: [String]) throws -> Int {
        try blocking("RingIO info, 16 at a time", timeout: 120) {
            try await withThrowingTaskGroup(of: Int.self) { group in
                var n = 0
                var next = 0
                while next < min(16, paths.count) {
                    let path = paths[next]
                    group.addTask { try await IO.info(at: FilePath(path)).type == .regular ? 1 : 0 }
                    next += 1
                }
                while let one = try await group.next() {
                    n += one
                    if next < paths.count {
                        let path = paths[next]
                        group.addTask { try await IO.info(at: FilePath(path)).type == .regular ? 1 : 0 }
                        next += 1
                    }
                }
                return n
            }
        }
    }

    static func statxLoop(_ paths: [String]) -> Int {
        var n = 0
        var status = stat()
        for path in paths where stat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFREG { n += 1 }
        return n
    }

    // MARK: - lines

    static func linesRingIO(_ path: String) throws -> Int {
        try blocking("RingIO lines", timeout: 300) {
            var lines = 0, bytes = 0
            for try await line in IO.lines(at: FilePath(path)) {
                lines += 1
                bytes += line.utf8.count
            }
            return lines &* 31 &+ bytes
        }
    }

    static func linesGetline(_ path: String) throws -> Int {
        guard let file = fopen(path, "r") else { throw BenchError("fopen \(path): errno \(errno)") }
        defer { fclose(file) }
        var line: UnsafeMutablePointer<CChar>? = nil
        var capacity = 0
        defer { free(line) }
        var lines = 0, bytes = 0
        while true {
            let n = getline(&line, &capacity, file)
            if n < 0 { break }
            lines += 1
            bytes += n - (line![n - 1] == 0x0A ? 1 : 0)
        }
        return lines &* 31 &+ bytes
    }

    // MARK: - remove

    /// `directories` directories of `files` files of 4 KiB (seeded bytes) under `root`.
    static func makeCopySource(_ root: String, directories: Int, files: Int) throws {
        try make(root)
        var bytes = [UInt8](repeating: 0, count: 4096)
        for d in 0..<directories {
            try make(root + "/d\(d)")
            for f in 0..<files {
                for i in 0..<8 { bytes[i] = UInt8(truncatingIfNeeded: (d * files + f) >> (i * 8)) }
                let path = root + "/d\(d)/f\(f)"
                let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
                guard fd >= 0, write(fd, bytes, bytes.count) == bytes.count else { throw BenchError("write \(path): errno \(errno)") }
                close(fd)
            }
        }
    }

    /// Checks, cheaply (in the timed run), that the copy's last file is
    /// there whole; `expected`: the files in the tree (returned).
    /// `verifyCopy` counts them all, untimed, after the last round.
    static func countCopied(_ root: String, expected: Int) throws -> Int {
        let last = expected == 2000 ? root + "/d0/f1999" : root + "/d99/f99"
        var status = stat()
        guard lstat(last, &status) == 0, status.st_size == 4096 else { throw BenchError("\(last) was not copied") }
        return expected
    }

    static func verifyCopy(_ root: String, expected: Int) throws {
        let n = try countFind(root)
        guard n == expected else { throw BenchError("the last copy holds \(n) files, not \(expected)") }
    }

    static func copyRingIO(_ source: String, _ destination: String, expected: Int = 10_000) throws -> Int {
        try blocking("RingIO copyItem", timeout: 300) {
            try await IO.copyItem(from: FilePath(source), to: FilePath(destination))
        }
        return try countCopied(destination, expected: expected)
    }

    static func copyCommand(_ argv: [String], _ destination: String, expected: Int = 10_000) throws -> Int {
        let child = try spawn(argv, timeout: 300)
        guard child.status == 0 else { throw BenchError("\(argv.joined(separator: " ")): status \(child.status)") }
        return try countCopied(destination, expected: expected)
    }

    static func removeRingIO(_ path: String) throws -> Int {
        let removed = try blocking("RingIO removeItem", timeout: 300) {
            try await IO.removeItem(at: FilePath(path), recursively: true)
        }
        guard removed == 10_101 else { throw BenchError("RingIO removed \(removed) items, not 10,101") }
        return exists(path) ? 0 : 1
    }

    static func removeRm(_ path: String) throws -> Int {
        let child = try spawn(["/bin/rm", "-rf", path], timeout: 300)
        guard child.status == 0 else { throw BenchError("rm -rf: status \(child.status)") }
        return exists(path) ? 0 : 1
    }
}

extension String {
    /// The string without `characters` at either end.
    func trimmingCharacters(in characters: String) -> String {
        let set = Set(characters)
        return String(self.drop(while: { set.contains($0) }).reversed().drop(while: { set.contains($0) }).reversed())
    }
}
