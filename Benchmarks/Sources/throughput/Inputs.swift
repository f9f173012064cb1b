// The inputs: the workspace on a real disk, the seeded source file with its
// per-block checksums, the small files, and the checks that each result is right.
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import BenchSupport

// MARK: - files

/// The directory for the benchmark's files, on the real disk.
struct Workspace {
    let dir: String
    let source: String
    let size: Int
    /// The file system holding the files: its type, mount point and device.
    let filesystem: (type: String, mountPoint: String, device: String)

    func destination(_ name: String) -> String { "\(dir)/copy-\(name).bin" }
    /// The small files' directory, and a system's copy of it.
    var smallFiles: String { dir + "/small" }
    var readFiles: String { dir + "/small12" }
    func destinationTree(_ name: String) -> String { "\(dir)/tree-\(name)" }
    func log(_ name: String) -> String { "\(dir)/log-\(name).bin" }

    init(parent: String?, size: Int) throws {
        let base = parent ?? getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        filesystem = Self.mount(of: base)
        guard filesystem.type != "tmpfs" && filesystem.type != "ramfs" else {
            throw BenchError("\(base) is on \(filesystem.type): pass --dir on a real disk")
        }
        var fs = statvfs()
        guard statvfs(base, &fs) == 0 else { throw BenchError("cannot statvfs \(base): errno \(errno)") }
        let free = Int(fs.f_bavail) * Int(fs.f_bsize)
        guard free > 3 * size + (1 << 30) else {
            throw BenchError("\(base) has \(free >> 20) MiB free; the run needs about \((3 * size) >> 20) MiB")
        }
        var template = Array("\(base)/ringio-throughput-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { throw BenchError("mkdtemp in \(base): errno \(errno)") }
        dir = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        source = dir + "/source.bin"
        self.size = size
    }

    /// The file system holding `path`: the longest mount point in /proc/mounts that contains it.
    static func mount(of path: String) -> (type: String, mountPoint: String, device: String) {
        let unknown = (type: "unknown", mountPoint: "?", device: "?")
        guard let resolved = realpath(path, nil) else { return unknown }
        let full = String(cString: resolved)
        free(resolved)
        guard let mounts = fopen("/proc/mounts", "r") else { return unknown }
        defer { fclose(mounts) }
        var best = (length: -1, mount: unknown)
        var line: UnsafeMutablePointer<CChar>? = nil
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, mounts) > 0 {
            let fields = String(cString: line!).split(separator: " ")
            guard fields.count >= 3 else { continue }
            let point = String(fields[1])
            let contains = full == point || point == "/" || full.hasPrefix(point + "/")
            if contains && point.count > best.length { best = (point.count, (String(fields[2]), point, String(fields[0]))) }
        }
        return best.mount
    }

    func remove() { removeTree(dir) }
}

/// Deletes `path` and, for a directory, everything under it (no symlinks are followed).
func removeTree(_ path: String) {
    var st = stat()
    guard lstat(path, &st) == 0 else { return }
    if st.st_mode & S_IFMT == S_IFDIR {
        for name in directoryEntries(path) { removeTree("\(path)/\(name)") }
        rmdir(path)
    } else {
        unlink(path)
    }
}

/// The names in a directory, without "." and "..".
func directoryEntries(_ path: String) -> [String] {
    guard let d = opendir(path) else { return [] }
    defer { closedir(d) }
    var names: [String] = []
    while let entry = readdir(d) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}

let blockSize = 1 << 20

/// Writes `size` bytes of a fixed-seed xorshift stream to `path` (every block differs,
/// so a misplaced block is caught by the content check), then syncs it.
/// Returns the file's per-block checksums, against which reads are checked.
func generate(_ path: String, size: Int) throws -> SourceSums {
    let fd = try openFile(path, O_WRONLY | O_CREAT | O_TRUNC)
    defer { close(fd) }
    let block = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 4096)
    defer { block.deallocate() }
    var x: UInt64 = 0x9E37_79B9_7F4A_7C15
    var written = 0
    var sums: [UInt64] = []
    sums.reserveCapacity((size + 4095) / 4096)
    while written < size {
        let words = block.bindMemory(to: UInt64.self)
        for i in words.indices {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            words[i] = x
        }
        let n = min(blockSize, size - written)
        var at = 0
        while at < n {
            let length = min(4096, n - at)
            sums.append(wordSum(UnsafeRawBufferPointer(rebasing: block[at..<(at + length)])))
            at += length
        }
        guard write(fd, block.baseAddress, n) == n else { throw BenchError("write \(path): errno \(errno)") }
        written += n
    }
    guard fsync(fd) == 0 else { throw BenchError("fsync \(path): errno \(errno)") }
    return SourceSums(blocks: sums)
}

/// Writes `count` files of `size` seeded bytes each into the new directory `dir`, then syncs them.
func generateSmallFiles(_ dir: String, count: Int, size: Int) throws {
    guard mkdir(dir, 0o755) == 0 else { throw BenchError("mkdir \(dir): errno \(errno)") }
    var bytes = [UInt64](repeating: 0, count: (size + 7) / 8)
    var x: UInt64 = 0x0123_4567_89AB_CDEF
    for i in 0..<count {
        for j in bytes.indices {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            bytes[j] = x
        }
        let fd = try openFile(smallFilePath(dir, i), O_WRONLY | O_CREAT | O_TRUNC)
        defer { close(fd) }
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, size) }
        guard n == size else { throw BenchError("write \(smallFilePath(dir, i)): errno \(errno)") }
    }
    sync()
}

/// The path of small file `index` in `dir`.
func smallFilePath(_ dir: String, _ index: Int) -> String { "\(dir)/f\(index).bin" }

/// Throws unless `copy` holds exactly the files of `original`, each with the same bytes.
func requireIdenticalTrees(_ original: String, _ copy: String) throws {
    let names = directoryEntries(original).sorted()
    let copied = directoryEntries(copy).sorted()
    guard names == copied else {
        throw BenchError("\(copy) holds \(copied.count) files, \(original) \(names.count)"
                         + (copied.count == names.count ? " (different names)" : ""))
    }
    for name in names { try requireIdentical("\(original)/\(name)", "\(copy)/\(name)") }
}

func openFile(_ path: String, _ flags: Int32, _ mode: mode_t = 0o644) throws -> Int32 {
    let fd = open(path, flags | O_CLOEXEC, mode)
    guard fd >= 0 else { throw BenchError("open \(path): errno \(errno)") }
    return fd
}

func fileSize(_ path: String) -> Int? {
    var st = stat()
    return stat(path, &st) == 0 ? Int(st.st_size) : nil
}

/// Reads the whole file (to bring it into the page cache); returns its size.
@discardableResult
func readThrough(_ path: String) throws -> Int {
    let fd = try openFile(path, O_RDONLY)
    defer { close(fd) }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 4096)
    defer { buffer.deallocate() }
    var total = 0
    while true {
        let n = read(fd, buffer.baseAddress, blockSize)
        guard n >= 0 else { throw BenchError("read \(path): errno \(errno)") }
        if n == 0 { return total }
        total += n
    }
}

/// The fraction of the file's pages in the page cache (mincore).
func residentFraction(_ path: String) throws -> Double {
    let fd = try openFile(path, O_RDONLY)
    defer { close(fd) }
    guard let size = fileSize(path), size > 0 else { return 1 }
    guard let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), map != MAP_FAILED else {
        throw BenchError("mmap \(path): errno \(errno)")
    }
    defer { munmap(map, size) }
    let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
    var pages = [UInt8](repeating: 0, count: (size + pageSize - 1) / pageSize)
    guard mincore(map, size, &pages) == 0 else { throw BenchError("mincore \(path): errno \(errno)") }
    return Double(pages.reduce(0) { $0 + Int($1 & 1) }) / Double(pages.count)
}

/// Throws unless the two files have the same bytes.
func requireIdentical(_ a: String, _ b: String) throws {
    let fa = try openFile(a, O_RDONLY), fb = try openFile(b, O_RDONLY)
    defer { close(fa); close(fb) }
    let ba = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 4096)
    let bb = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 4096)
    defer { ba.deallocate(); bb.deallocate() }
    var offset = 0
    while true {
        let na = read(fa, ba.baseAddress, blockSize)
        var nb = 0
        while nb < max(na, 0) {
            let n = read(fb, bb.baseAddress! + nb, na - nb)
            if n <= 0 { break }
            nb += n
        }
        guard na >= 0 else { throw BenchError("read \(a): errno \(errno)") }
        if na == 0 {
            guard read(fb, bb.baseAddress, 1) == 0 else { throw BenchError("\(b) is longer than \(a) (\(offset) bytes)") }
            return
        }
        guard nb == na else { throw BenchError("\(b) is shorter than \(a): ends at \(offset + nb) bytes") }
        if memcmp(ba.baseAddress!, bb.baseAddress!, na) != 0 {
            var i = 0
            while ba[i] == bb[i] { i += 1 }
            throw BenchError("\(b) differs from \(a) at byte \(offset + i)")
        }
        offset += na
    }
}

/// Fixed-seed, 4 KiB-aligned random offsets below `size`.
func randomOffsets(count: Int, size: Int, seed: UInt64 = 0x1234_5678) -> [Int64] {
    var x = seed
    let blocks = UInt64(size / 4096)
    return (0..<count).map { _ in
        x ^= x << 13; x ^= x >> 7; x ^= x << 17
        return Int64(x % blocks) * 4096
    }
}

// MARK: - the append log

/// The append-log workload's records: record `i` is `i` as 8 little-endian
/// bytes followed by a fixed seeded payload, `recordSize` bytes in all.
struct AppendLog: Sendable {
    let recordSize: Int
    let records: Int
    /// The `recordSize - 8` bytes after each record's index.
    let payload: [UInt8]

    var totalBytes: Int { recordSize * records }

    init(recordSize: Int = 64 << 10, totalBytes: Int) {
        self.recordSize = recordSize
        records = max(1, totalBytes / recordSize)
        var x: UInt64 = 0xA5A5_5A5A_0F0F_F0F0
        payload = (0..<(recordSize - 8)).map { _ in
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            return UInt8(truncatingIfNeeded: x)
        }
    }

    /// Record `index`'s first 8 bytes.
    func header(_ index: Int) -> [UInt8] { withUnsafeBytes(of: UInt64(index).littleEndian) { Array($0) } }

    /// Throws unless the file at `path` holds exactly the records 0..<records, in order.
    func verify(_ path: String) throws {
        guard let size = fileSize(path), size == totalBytes else {
            throw BenchError("the log is \(fileSize(path).map(String.init) ?? "missing") bytes, not \(totalBytes)")
        }
        let fd = try openFile(path, O_RDONLY)
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: recordSize, alignment: 4096)
        defer { buffer.deallocate() }
        for index in 0..<records {
            var got = 0
            while got < recordSize {
                let n = pread(fd, buffer.baseAddress! + got, recordSize - got, off_t(index * recordSize + got))
                guard n > 0 else { throw BenchError("reading the log back: errno \(errno)") }
                got += n
            }
            let stamped = UInt64(littleEndian: buffer.loadUnaligned(as: UInt64.self))
            guard stamped == UInt64(index) else {
                throw BenchError("record \(index) of the log holds record \(stamped)'s index")
            }
            let same = payload.withUnsafeBytes { memcmp($0.baseAddress!, buffer.baseAddress! + 8, recordSize - 8) == 0 }
            guard same else { throw BenchError("record \(index) of the log has a wrong payload") }
        }
    }
}
