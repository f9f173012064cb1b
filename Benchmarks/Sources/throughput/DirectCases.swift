// throughput direct: direct I/O, range reads and registered resources.
//
//   swift run -c release --package-path Benchmarks throughput direct \
//       [--size-mib 1024] [--range-mib 4096] [--ranges 20000] [--reads 200000] [--rounds 3] [--dir DIR]
//       [--no-drop] [--only cold,range,registered]
//
// 1. Cold sequential read of a 1 GiB file to EOF: RingIO stream channel with
//    direct I/O and buffered, DispatchIO, fio io_uring --direct=1 (the
//    device's ceiling) and buffered. The page cache is dropped before each
//    (sync; echo 3 > /proc/sys/vm/drop_caches; root only: elsewhere the
//    report says the reads were warm).
// 2. Cold copy of it: RingIO direct (both channels), RingIO buffered,
//    DispatchIO, cp; each timed to its return and to its data being on disk
//    (plus an fdatasync of the copy, which the direct copy barely needs).
// 3. Range reads: 20,000 random ranges of 64 KiB – 1 MiB of a 4 GiB
//    page-cached file, 32 in flight, every cache line of each range read, in a
//    child process each for its peak RSS: RingIO random channel (buffered,
//    and direct), mmap (32 threads), DispatchIO.
// 4. Random reads, 32 in flight, on engines with no registered resources,
//    registered files, and registered buffers and files: 4 KiB page-cached
//    (which never use the pool's registered buffers), 1 MiB page-cached and
//    1 MiB direct (which do).
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import Dispatch
@_spi(Engine) import RingIO
import Synchronization
import SystemPackage

enum DirectBench {
    struct Options {
        var sizeMiB = 1024
        var rangeMiB = 4096
        var ranges = 20_000
        var reads = 200_000
        var rounds = 3
        var directory: String?
        var drop = true
        var only: [String] = []
    }

    static func main(_ arguments: [String]) -> Never {
        if arguments.first == "child" { child(Array(arguments.dropFirst())) }
        var o = Options()
        var it = arguments.makeIterator()
        while let option = it.next() {
            switch option {
            case "--size-mib": o.sizeMiB = Int(it.next() ?? "") ?? 0
            case "--range-mib": o.rangeMiB = Int(it.next() ?? "") ?? 0
            case "--ranges": o.ranges = Int(it.next() ?? "") ?? 0
            case "--reads": o.reads = Int(it.next() ?? "") ?? 0
            case "--rounds": o.rounds = Int(it.next() ?? "") ?? 0
            case "--dir": o.directory = it.next()
            case "--no-drop": o.drop = false
            case "--only": o.only += (it.next() ?? "").split(separator: ",").map(String.init)
            default:
                print("usage: throughput direct [--size-mib N] [--range-mib N] [--ranges N] [--reads N] [--rounds N] [--dir DIR] [--no-drop] [--only cold,range,registered]")
                exit(option == "--help" ? 0 : 2)
            }
        }
        guard o.sizeMiB > 0, o.rangeMiB > 0, o.ranges > 0, o.reads > 0, o.rounds > 0 else {
            print("throughput direct: sizes and counts must be positive")
            exit(2)
        }
        do {
            try run(o)
            exit(0)
        } catch {
            print("throughput direct: \(error)")
            exit(1)
        }
    }

    static func wants(_ o: Options, _ section: String) -> Bool { o.only.isEmpty || o.only.contains(section) }

    // MARK: - the run

    static func run(_ o: Options) throws {
        let size = o.sizeMiB << 20
        let rangeSize = o.rangeMiB << 20
        let workspace = try Workspace(parent: o.directory, size: max(size, rangeSize / 2))
        defer { workspace.remove() }
        let timeout = max(120, Double(size) / Double(20 << 20))
        let fio = Fio.locate()
        var lines: [String] = []
        let canDrop = o.drop && dropCaches()
        let coldNote = canDrop ? "page cache dropped before each run"
            : (o.drop ? "NOT cold: dropping the page cache was not permitted (needs root)" : "NOT cold: --no-drop")

        if wants(o, "cold") {
            progress("direct: generating \(o.sizeMiB) MiB")
            let sums = try generate(workspace.source, size: size)
            var reads: [String: [Double]] = [:]
            var copies: [String: [(Double, Double)]] = [:]
            for round in 1...o.rounds {
                var readCases: [(String, () throws -> Double)] = [
                    ("RingIO stream, direct I/O", { try ringRead(workspace.source, size: size, direct: true, timeout: timeout) }),
                    ("RingIO stream, buffered", { try ringRead(workspace.source, size: size, direct: false, timeout: timeout) }),
                    ("DispatchIO stream", { try DispatchIOCases.sequentialRead(workspace.source, size: size, expected: sums.whole, timeout: timeout).rate }),
                ]
                if let fio {
                    readCases.append(("fio io_uring --direct=1, 8 × 1 MiB", { try fio.coldRead(workspace.source, size: size, direct: true, timeout: timeout) }))
                    readCases.append(("fio io_uring buffered, 8 × 1 MiB", { try fio.coldRead(workspace.source, size: size, direct: false, timeout: timeout) }))
                    // What POSIX_FADV_SEQUENTIAL (fio's default hint) is worth: RingIO does not give it,
                    // as it made cold buffered reads slower here (see Benchmarks/results/direct-io.md).
                    readCases.append(("fio io_uring buffered, no fadvise hint", { try fio.coldRead(workspace.source, size: size, direct: false, hint: false, timeout: timeout) }))
                }
                for (name, measure) in rotated(readCases, round) {
                    if canDrop { _ = dropCaches() }
                    let rate = try measure()
                    reads[name, default: []].append(rate)
                    progress("round \(round) cold read \(name): \(fixed(rate / gib, 2)) GiB/s")
                }
                var copyCases: [(String, (String) throws -> Void)] = [
                    ("RingIO direct (reader and writer)", { try ringCopy(workspace.source, $0, direct: true, timeout: timeout) }),
                    ("RingIO buffered", { try RingIOCases.copy(workspace.source, $0, timeout: timeout) }),
                    ("DispatchIO", { try DispatchIOCases.copy(workspace.source, $0, timeout: timeout) }),
                ]
                if let cp = which("cp") {
                    copyCases.append(("cp", { destination in
                        let run = try forkExec([cp, workspace.source, destination])
                        guard run.status == 0 else { throw BenchError("cp: \(describeWaitStatus(run.status))") }
                    }))
                }
                for (name, copy) in rotated(copyCases, round) {
                    let destination = workspace.destination("cold")
                    unlink(destination)
                    if canDrop { _ = dropCaches() }
                    let start = now()
                    try copy(destination)
                    let returned = seconds(since: start)
                    let fd = try openFile(destination, O_WRONLY)
                    fdatasync(fd)
                    close(fd)
                    sync()
                    let durable = seconds(since: start)
                    try requireIdentical(workspace.source, destination)
                    unlink(destination)
                    copies[name, default: []].append((returned, durable))
                    progress("round \(round) cold copy \(name): \(fixed(returned, 2)) s, on disk \(fixed(durable, 2)) s")
                }
            }
            unlink(workspace.source)
            lines.append("\n### Cold sequential read, \(o.sizeMiB) MiB (\(coldNote)); median of \(o.rounds)\n")
            let directRead = median(reads["RingIO stream, direct I/O"] ?? [0])
            lines.append("| system | GiB/s | min – max | ÷ RingIO direct |")
            lines.append("|---|---:|---:|---:|")
            for (name, xs) in reads.sorted(by: { median($0.value) > median($1.value) }) {
                lines.append("| \(name) | \(fixed(median(xs) / gib, 2)) | \(fixed(xs.min()! / gib, 2)) – \(fixed(xs.max()! / gib, 2)) | \(fixed(directRead / median(xs), 2))× |")
            }
            if let fioDirect = reads["fio io_uring --direct=1, 8 × 1 MiB"] {
                let ratio = directRead / median(fioDirect)
                lines.append("\n- goal: RingIO direct read ≥ 0.9× fio --direct=1: \(fixed(ratio, 2))× — \(ratio >= 0.9 ? "met" : "NOT met")")
            }
            lines.append("\n### Cold copy, \(o.sizeMiB) MiB (\(coldNote)): seconds to return, and until on disk (fdatasync + sync after)\n")
            lines.append("| system | s to return | s on disk | on disk ÷ cp |")
            lines.append("|---|---:|---:|---:|")
            let cpDurable = copies["cp"].map { median($0.map(\.1)) }
            for (name, xs) in copies.sorted(by: { median($0.value.map(\.1)) < median($1.value.map(\.1)) }) {
                let durable = median(xs.map(\.1))
                lines.append("| \(name) | \(fixed(median(xs.map(\.0)), 2)) | \(fixed(durable, 2)) | \(cpDurable.map { fixed(durable / $0, 2) + "×" } ?? "—") |")
            }
            if let cpDurable, let direct = copies["RingIO direct (reader and writer)"] {
                let ratio = median(direct.map(\.1)) / cpDurable
                lines.append("\n- goal: RingIO direct copy ≤ 0.8× cp's time (on disk): \(fixed(ratio, 2))× — \(ratio <= 0.8 ? "met" : "NOT met")")
                let returned = median(direct.map(\.0)) / median(copies["cp"]!.map(\.0))
                lines.append("- RingIO direct copy's time to return ÷ cp's (which leaves its writes in the page cache): \(fixed(returned, 2))×")
            }
        }

        if wants(o, "range") {
            let path = workspace.dir + "/ranges.bin"
            progress("direct: generating \(o.rangeMiB) MiB for range reads")
            _ = try generate(path, size: rangeSize)
            defer { unlink(path) }
            try readThrough(path)
            var results: [String: [(Double, Double)]] = [:]
            let systems = ["ringio", "ringio-direct", "mmap", "dispatchio"]
            for round in 1...o.rounds {
                for system in rotated(systems, round) {
                    if system != "ringio-direct", try residentFraction(path) < 1 { try readThrough(path) }
                    let child = try spawn([selfPath, "direct", "child", "range-\(system)", path, "\(o.ranges)", "\(timeout)"],
                                          timeout: timeout + 30)
                    guard child.exitedCleanly else { throw BenchError("range-\(system): \(child.statusDescription): \(child.output)") }
                    let values = keyValues(child.output)
                    guard let s = values["seconds"], let peak = values["peak_kib"] else {
                        throw BenchError("range-\(system) printed no measurement: \(child.output)")
                    }
                    results[system, default: []].append((s, peak / 1024))
                    progress("round \(round) ranges \(system): \(fixed(s, 2)) s, peak RSS \(fixed(peak / 1024, 0)) MiB")
                }
            }
            let labels = ["ringio": "RingIO random channel, buffered", "ringio-direct": "RingIO random channel, direct I/O",
                          "mmap": "mmap, 32 threads", "dispatchio": "DispatchIO random channel"]
            lines.append("\n### Range reads: \(grouped(Double(o.ranges))) random ranges of 64 KiB – 1 MiB of a \(o.rangeMiB) MiB page-cached file, 32 in flight, every cache line of each range read; median of \(o.rounds)\n")
            lines.append("| system | seconds | min – max | ÷ mmap | peak RSS MiB |")
            lines.append("|---|---:|---:|---:|---:|")
            let mmapTime = results["mmap"].map { median($0.map(\.0)) }
            for system in systems {
                guard let xs = results[system] else { continue }
                let t = median(xs.map(\.0))
                lines.append("| \(labels[system]!) | \(fixed(t, 2)) | \(fixed(xs.map(\.0).min()!, 2)) – \(fixed(xs.map(\.0).max()!, 2)) | \(mmapTime.map { fixed(t / $0, 2) + "×" } ?? "—") | \(fixed(median(xs.map(\.1)), 0)) |")
            }
            if let mmapTime, let ring = results["ringio"] {
                let ratio = median(ring.map(\.0)) / mmapTime
                let rss = median(ring.map(\.1)) / median(results["mmap"]!.map(\.1))
                lines.append("\n- goal: RingIO within 1.1× of mmap's time at a fraction of its RSS: \(fixed(ratio, 2))×, RSS \(fixed(rss, 3))× — \(ratio <= 1.1 && rss < 0.5 ? "met" : "NOT met")")
            }
        }

        if wants(o, "registered") {
            let path = workspace.dir + "/random.bin"
            _ = try generate(path, size: size)
            defer { unlink(path) }
            try readThrough(path)
            let small = randomOffsets(count: o.reads, size: size)
            let large = randomOffsets(count: max(2000, o.reads / 50), size: size - (1 << 20)).map { $0 / (1 << 20) * (1 << 20) }
            var rates: [String: [Double]] = [:]
            let engines = [("none", try engine(buffers: false, files: 0)), ("files", try engine(buffers: false, files: 64)),
                           ("buffers + files", try engine(buffers: true, files: 64))]
            let shapes: [(String, [Int64], Int, Bool)] = [("4 KiB", small, 4096, false), ("1 MiB", large, 1 << 20, false),
                                                          ("1 MiB direct", large, 1 << 20, true)]
            for round in 1...o.rounds {
                var cases: [(String, IOEngine, [Int64], Int, Bool)] = []
                for (shape, offsets, length, direct) in shapes {
                    for (registered, engine) in engines { cases.append(("\(shape)|\(registered)", engine, offsets, length, direct)) }
                }
                for (name, engine, offsets, length, direct) in rotated(cases, round) {
                    if try residentFraction(path) < 1 { try readThrough(path) }
                    let rate = try randomReads(path, offsets: offsets, length: length, direct: direct, engine: engine,
                                               timeout: timeout)
                    rates[name, default: []].append(rate)
                    progress("round \(round) random \(name): \(grouped(rate)) reads/s")
                }
            }
            lines.append("\n### Random reads, 32 in flight (page-cached unless direct): registered buffers and files vs none; median of \(o.rounds)\n")
            lines.append("| reads | registered | reads/s | min – max | ÷ none |")
            lines.append("|---|---|---:|---:|---:|")
            for (shape, _, _, _) in shapes {
                let base = median(rates["\(shape)|none"]!)
                for (registered, _) in engines {
                    let xs = rates["\(shape)|\(registered)"]!
                    lines.append("| \(shape) | \(registered) | \(grouped(median(xs))) | \(grouped(xs.min()!)) – \(grouped(xs.max()!)) | \(fixed(median(xs) / base, 3))× |")
                }
            }
            let stats = engines[2].1.registrationStatistics
            lines.append("\nThe 4 KiB reads never use the pool's registered buffers (too small: they read into exactly sized allocations). Buffers + files engine: \(stats.fixedBufferRequests) READ_FIXED requests, \(stats.fixedFileRequests) by registered fd.")
        }

        print("\n## RingIO direct I/O and registered resources\n")
        print("\(sysconf(Int32(_SC_NPROCESSORS_ONLN))) cores, \(workspace.filesystem), RingIO engine \(IOEngine.shared.backend); \(fio?.version ?? "no fio"). Shared machine: absolute figures are noisy.")
        for line in lines { print(line) }
    }

    static func rotated<T>(_ xs: [T], _ round: Int) -> [T] {
        let shift = (round - 1) % xs.count
        return Array(xs[shift...] + xs[..<shift])
    }

    /// sync; echo 3 > /proc/sys/vm/drop_caches. False where not permitted.
    static func dropCaches() -> Bool {
        sync()
        let fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return write(fd, "3\n", 2) == 2
    }

    static func engine(buffers: Bool, files: Int) throws -> IOEngine {
        var configuration = IOEngine.Configuration()
        configuration.registersBuffers = buffers
        configuration.registeredFileSlots = files
        return try IOEngine(configuration: configuration)
    }

    // MARK: - RingIO cases

    static func ringRead(_ path: String, size: Int, direct: Bool, timeout: Double) throws -> Double {
        let queue = IOQueue(label: "direct.read")
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue)
        if direct { channel.setDirectIO(.required) }
        let tally = Tally()
        let done = Completion()
        let start = now()
        channel.read(length: .max, queue: queue) { isDone, data, error in
            tally.add(data?.count ?? 0)
            if isDone { done.finish(error.map { "read ended with \($0)" }) }
        }
        try done.wait("RingIO cold read", timeout: timeout) { tally.summary }
        let elapsed = seconds(since: start)
        channel.close()
        guard tally.bytes == size else { throw BenchError("RingIO read \(tally.bytes) of \(size) bytes") }
        return Double(size) / elapsed
    }

    /// A stream read channel whose handler writes each chunk to a stream
    /// write channel (at most `copyWindowBytes` outstanding), both in direct
    /// I/O mode when `direct`: the chunks of the direct read are aligned pool
    /// buffers, written as they are (WRITE_FIXED where registered).
    static func ringCopy(_ source: String, _ destination: String, direct: Bool, timeout: Double) throws {
        let readQueue = IOQueue(label: "direct.copy.read"), writeQueue = IOQueue(label: "direct.copy.write")
        let reader = try IOChannel(kind: .stream, path: FilePath(source), mode: .readOnly, queue: readQueue)
        let writer = try IOChannel(kind: .stream, path: FilePath(destination), mode: .writeOnly,
                                   options: [.create, .truncate], permissions: [.ownerReadWrite], queue: writeQueue)
        if direct {
            reader.setDirectIO(.required)
            writer.setDirectIO(.required)
        }
        let window = WriteWindow(limit: copyWindowBytes)
        let readDone = Completion()
        reader.read(length: .max, queue: readQueue) { isDone, data, error in
            if let data, !data.isEmpty {
                let count = data.count
                window.acquire(count)
                writer.write(data: data, queue: writeQueue) { writeDone, unwritten, writeError in
                    if writeDone {
                        window.release(count, error: writeError.map { "write ended with \($0), \(unwritten?.count ?? 0) bytes unwritten" })
                    }
                }
            }
            if isDone { readDone.finish(error.map { "read ended with \($0)" }) }
        }
        try readDone.wait("RingIO copy read", timeout: timeout)
        try window.drain("RingIO copy writes", timeout: timeout)
        let closed = Completion()
        let closer = IOChannel(kind: .stream, channel: writer, queue: writeQueue) { _ in closed.finish() }
        reader.close()
        writer.close()
        closer.close()
        try closed.wait("RingIO copy: writer closed", timeout: timeout)
    }

    static func randomReads(_ path: String, offsets: [Int64], length: Int, direct: Bool, engine: IOEngine,
                            timeout: Double) throws -> Double {
        let queue = IOQueue(label: "direct.random")
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        defer { channel.close() }
        if direct { channel.setDirectIO(.required) }
        let loop = RangeLoop(count: offsets.count) { i, finished in
            let tally = Tally()
            channel.read(offset: offsets[i], length: length, queue: queue) { done, data, error in
                tally.add(data?.count ?? 0)
                if done { finished(tally.bytes == length && error == nil ? nil : "read \(i): \(tally.bytes) bytes, \(String(describing: error))") }
            }
        }
        let elapsed = try loop.run(depth: 32, what: "random reads", timeout: timeout)
        return Double(offsets.count) / elapsed
    }

    // MARK: - range reads, in a child process each

    /// Fixed-seed ranges: 64 KiB-aligned starts, 64 KiB – 1 MiB long, inside `size`.
    static func ranges(count: Int, size: Int) -> [(offset: Int64, length: Int)] {
        var x: UInt64 = 0x5EED_0F_4A4E
        func next() -> UInt64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
        return (0..<count).map { _ in
            let length = (1 + Int(next() % 16)) * 65536
            let offset = Int64(next() % UInt64((size - length) / 65536)) * 65536
            return (offset, length)
        }
    }

    /// Reads one byte per 64-byte cache line of `chunk`: every line of the
    /// range comes into the CPU, as for a consumer that parses or checksums
    /// it. (One byte per page would favour mmap unfairly: with fault-around
    /// a mapped page can be touched without its bytes ever being read.)
    static func touch(_ chunk: DataChunk) -> Int {
        var sum = 0
        chunk.apply { _, _, bytes in
            var i = 0
            while i < bytes.count { sum &+= Int(bytes[i]); i += 64 }
            return true
        }
        return sum
    }

    static func child(_ args: [String]) -> Never {
        guard args.count == 4, let count = Int(args[2]), let timeout = Double(args[3]), let size = fileSize(args[1]) else {
            print("usage: throughput direct child range-SYSTEM PATH COUNT TIMEOUT")
            exit(2)
        }
        let path = args[1]
        let list = ranges(count: count, size: size)
        do {
            let start = now()
            switch args[0] {
            case "range-ringio": try rangeRingIO(path, list, direct: false, timeout: timeout)
            case "range-ringio-direct": try rangeRingIO(path, list, direct: true, timeout: timeout)
            case "range-mmap": try rangeMmap(path, list, size: size)
            case "range-dispatchio": try rangeDispatchIO(path, list, timeout: timeout)
            default: throw BenchError("unknown case \(args[0])")
            }
            print("seconds=\(seconds(since: start)) peak_kib=\(peakResidentKiB())")
            exit(0)
        } catch {
            print("error=\(error)")
            exit(1)
        }
    }

    static func rangeRingIO(_ path: String, _ list: [(offset: Int64, length: Int)], direct: Bool, timeout: Double) throws {
        let queue = IOQueue(label: "direct.ranges", kind: .concurrent)
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue)
        defer { channel.close() }
        if direct { channel.setDirectIO(.required) }
        let loop = RangeLoop(count: list.count) { i, finished in
            let seen = Tally()
            channel.read(offset: list[i].offset, length: list[i].length, queue: queue) { done, data, error in
                if let data {
                    if touch(data) == 42 { progress("") }  // keeps the loads
                    seen.add(data.count)
                }
                if done { finished(seen.bytes == list[i].length && error == nil ? nil : "range \(i): \(seen.bytes) bytes") }
            }
        }
        _ = try loop.run(depth: 32, what: "RingIO ranges", timeout: timeout)
    }

    static func rangeDispatchIO(_ path: String, _ list: [(offset: Int64, length: Int)], timeout: Double) throws {
        let fd = try openFile(path, O_RDONLY)
        let queue = DispatchQueue(label: "direct.ranges", attributes: .concurrent)
        let channel = DispatchIO(type: .random, fileDescriptor: fd, queue: queue) { _ in close(fd) }
        defer { channel.close() }
        let loop = RangeLoop(count: list.count) { i, finished in
            let seen = Tally()
            channel.read(offset: off_t(list[i].offset), length: list[i].length, queue: queue) { done, data, error in
                if let data {
                    var sum = 0
                    data.enumerateBytes { bytes, _, _ in
                        var j = 0
                        while j < bytes.count { sum &+= Int(bytes[j]); j += 64 }
                    }
                    if sum == 42 { progress("") }  // keeps the loads
                    seen.add(data.count)
                }
                if done { finished(seen.bytes == list[i].length && error == 0 ? nil : "range \(i): \(seen.bytes) bytes, errno \(error)") }
            }
        }
        _ = try loop.run(depth: 32, what: "DispatchIO ranges", timeout: timeout)
    }

    static func rangeMmap(_ path: String, _ list: [(offset: Int64, length: Int)], size: Int) throws {
        let fd = try openFile(path, O_RDONLY)
        defer { close(fd) }
        guard let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), map != MAP_FAILED else {
            throw BenchError("mmap: errno \(errno)")
        }
        defer { munmap(map, size) }
        let base = UInt(bitPattern: map)
        let next = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 32) { _ in
            let bytes = UnsafeRawPointer(bitPattern: base)!
            var sum = 0
            while true {
                let i = next.add(1, ordering: .relaxed).oldValue
                guard i < list.count else { break }
                var j = Int(list[i].offset)
                let end = j + list[i].length
                while j < end { sum &+= Int(bytes.load(fromByteOffset: j, as: UInt8.self)); j += 64 }
            }
            if sum == 42 { progress("") }  // keeps the loads
        }
    }
}

/// Keeps `depth` operations in flight until `count` are done; `issue(i, finished)`
/// starts operation i, which calls `finished` once with an error message or nil.
final class RangeLoop: Sendable {
    private let count: Int
    private let issue: @Sendable (Int, @escaping @Sendable (String?) -> Void) -> Void
    private let next = Atomic<Int>(0)
    private let completed = Atomic<Int>(0)
    private let completion = Completion()

    init(count: Int, issue: @escaping @Sendable (Int, @escaping @Sendable (String?) -> Void) -> Void) {
        self.count = count
        self.issue = issue
    }

    /// Seconds from the first issue to the last completion.
    func run(depth: Int, what: String, timeout: Double) throws -> Double {
        let start = now()
        for _ in 0..<min(depth, count) { startOne() }
        try completion.wait(what, timeout: timeout) { "\(completed.load(ordering: .relaxed)) of \(count) done" }
        return seconds(since: start)
    }

    private func startOne() {
        let i = next.add(1, ordering: .relaxed).oldValue
        guard i < count else { return }
        issue(i) { [self] error in
            if let error { return completion.finish(error) }
            if completed.add(1, ordering: .relaxed).newValue == count { completion.finish() } else { startOne() }
        }
    }
}

extension Fio {
    /// A sequential read of the whole (cold) file, 1 MiB blocks, 8 in flight.
    /// `hint`: fio's default fadvise hint (POSIX_FADV_SEQUENTIAL), or none.
    func coldRead(_ path: String, size: Int, direct: Bool, hint: Bool = true, timeout: Double) throws -> Double {
        let argv = [executable, "--name=cold", "--filename=\(path)", "--ioengine=io_uring", "--direct=\(direct ? 1 : 0)",
                    "--invalidate=0", "--rw=read", "--bs=1M", "--iodepth=8", "--size=\(size)", "--minimal",
                    "--fadvise_hint=\(hint ? 1 : 0)"]
        let result = try spawn(argv, timeout: timeout)
        guard result.exitedCleanly else { throw BenchError("fio: \(result.statusDescription)") }
        // --minimal (terse v3): field 7 is the read bandwidth in KiB/s.
        let fields = result.output.split(separator: ";", omittingEmptySubsequences: false)
        guard fields.count > 7, let kib = Double(fields[6]) else { throw BenchError("fio printed: \(result.output)") }
        return kib * 1024
    }
}
