// `throughput natural ...`: the first code a user writes (issue 26), each
// beside its peer in the same process and the same run:
//
//   read-await     `try await channel.read(offset:length: 4096)` in a loop   vs a pread loop
//   chunks         `for try await chunk in channel.chunks()`, 1 MiB and 64 KiB vs a read(2) loop
//   read-handler   the same with a handler on the user's serial queue, one in flight  vs pread, fio io_uring QD1
//   append-await   `try await log.write(data:)` per 4 KiB record, [.create, .append]  vs write(2) on O_APPEND
//   append-queued  the records queued with handlers on .append, then on .truncate
//   copy-handler   the README's handler copy (read handler → target.write)  vs a plain 1 MiB loop (+RSS)
//   copy-async     the README's async copy (`for try await chunk in source.chunks()`
//                  { `try await target.write(data: chunk)` })    vs the same plain loop (+RSS)
//   paths          path channels, one 4 KiB read each, then close            vs open/pread/close
//                  (closed from its handler; and awaited from a task)
//
// Options: --size-mib N (the cached file, default 1024; the copies' size), --busy N, --rounds N
// (median printed), --dir D, --only a,b. Rates are per second; "+RSS" is
// the peak resident set above the one before the case, sampled every 2 ms.
#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization
import BenchSupport
import RingIO
import SystemPackage

enum NaturalBench {
    struct Settings {
        var sizeMiB = 1024
        var busy = 0
        var rounds = 3
        var directory = "/tmp"
        var only: [String] = []
        var reads = 200_000
        var records = 65_536
        var paths = 10_000
        /// fio's t/io_uring (scripts/build-t-io_uring), the read-await row's
        /// io_uring peer; not run where it is not built.
        var tIoUring: String? = {
            let path = getenv("T_IO_URING").map { String(cString: $0) } ?? "/tmp/fio-src/t/io_uring"
            return access(path, X_OK) == 0 ? path : nil
        }()
    }

    static func main(_ args: [String]) -> Never {
        var s = Settings()
        var it = args.makeIterator()
        while let a = it.next() {
            switch a {
            case "--size-mib": s.sizeMiB = Int(it.next() ?? "") ?? s.sizeMiB
            case "--busy": s.busy = Int(it.next() ?? "") ?? 0
            case "--rounds": s.rounds = Int(it.next() ?? "") ?? s.rounds
            case "--dir": s.directory = it.next() ?? s.directory
            case "--only": s.only += (it.next() ?? "").split(separator: ",").map(String.init)
            case "--reads": s.reads = Int(it.next() ?? "") ?? s.reads
            case "--records": s.records = Int(it.next() ?? "") ?? s.records
            case "--paths": s.paths = Int(it.next() ?? "") ?? s.paths
            case "--t-io-uring": s.tIoUring = it.next()
            default:
                print("""
                    usage: throughput natural [--size-mib N] [--busy N] [--rounds N] [--dir D] [--only a,b]
                                              [--reads N] [--records N] [--paths N] [--t-io-uring PATH]
                    rows (--only matches part of a name): read-await, read-handler, append-await,
                    append-queued, copy-handler, copy-async (copy: both copies), chunks, paths
                    """)
                exit(a == "--help" || a == "-h" ? 0 : 2)
            }
        }
        do {
            try run(s)
            exit(0)
        } catch {
            print("throughput natural: \(error)")
            exit(1)
        }
    }

    /// One measured row: label → rate samples, +RSS samples (MiB).
    final class Results {
        var order: [String] = []
        var rates: [String: [Double]] = [:]
        var rss: [String: [Double]] = [:]
        func add(_ label: String, _ rate: Double, rssMiB: Double? = nil) {
            if rates[label] == nil { order.append(label) }
            rates[label, default: []].append(rate)
            if let rssMiB { rss[label, default: []].append(rssMiB) }
            let shown = label.contains("GiB/s") ? fixed(rate, 2) : grouped(rate)
            progress("  \(label): \(shown)" + (rssMiB.map { " +\(fixed($0, 0)) MiB" } ?? ""))
        }
    }

    static func wants(_ s: Settings, _ name: String) -> Bool { s.only.isEmpty || s.only.contains { name.contains($0) } }

    static func run(_ s: Settings) throws {
        let dir = "\(s.directory)/natural-\(getpid())"
        mkdir(dir, 0o755)
        defer { _ = system("rm -rf '\(dir)'") }
        let source = "\(dir)/source"
        let size = s.sizeMiB << 20
        try makeFile(source, size: size)
        let busy = s.busy > 0 ? BusyThreads(count: s.busy) : nil
        defer { busy?.finish() }
        let results = Results()
        // fio's io_uring engine, one read in flight: the read-handler row's io_uring peer.
        let fio = wants(s, "read-handler") ? Fio.locate() : nil
        for round in 1...s.rounds {
            progress("round \(round)/\(s.rounds)")
            if wants(s, "read-await") {
                results.add("read-await/ringio (reads/s)", try readAwait(source, size: size, reads: s.reads))
                let ringioCPU = lastCPURate.withLock { $0 }
                results.add("read-await/pread (reads/s)", preadLoop(source, size: size, reads: s.reads))
                // Per CPU second of the reading thread: what the other
                // engineers' load takes from the wall-clock rates, left out.
                results.add("read-await/ringio (reads per CPU-s)", ringioCPU)
                results.add("read-await/pread (reads per CPU-s)", lastCPURate.withLock { $0 })
                if let tool = s.tIoUring {
                    let (rate, perCPU) = try tIoUring(tool, source)
                    results.add("read-await/t-io_uring QD1 (reads/s)", rate)
                    results.add("read-await/t-io_uring QD1 (reads per CPU-s)", perCPU)
                }
            }
            if wants(s, "read-handler") {
                results.add("read-handler/ringio (reads/s)", try readHandler(source, size: size, reads: s.reads))
                results.add("read-handler/pread (reads/s)", preadLoop(source, size: size, reads: s.reads))
                if let fio {
                    results.add("read-handler/fio io_uring QD1 (reads/s)",
                                try fio.randomReads(source, size: size, count: s.reads, depth: 1, timeout: 300).rate)
                }
            }
            if wants(s, "append-await") {
                results.add("append-await/ringio (records/s)", try appendAwait("\(dir)/log1", records: s.records))
                results.add("append-await/write (records/s)", writeLoop("\(dir)/log2", records: s.records, append: true))
            }
            if wants(s, "append-queued") {
                let (r1, m1) = try measuringRSS { try appendQueued("\(dir)/log3", records: s.records, append: true) }
                results.add("append-queued/ringio .append (records/s)", r1, rssMiB: m1)
                let (r2, m2) = try measuringRSS { try appendQueued("\(dir)/log4", records: s.records, append: false) }
                results.add("append-queued/ringio .truncate (records/s)", r2, rssMiB: m2)
                results.add("append-queued/write (records/s)", writeLoop("\(dir)/log5", records: s.records, append: true))
            }
            if wants(s, "copy-handler") {
                let (r1, m1) = try measuringRSS { try copyHandler(source, "\(dir)/copy1", size: size) }
                results.add("copy-handler/ringio (GiB/s)", r1 / gib, rssMiB: m1)
                let (r2, m2) = try measuringRSS { try plainCopy(source, "\(dir)/copy2", size: size) }
                results.add("copy-handler/plain 1 MiB loop (GiB/s)", r2 / gib, rssMiB: m2)
                unlink("\(dir)/copy1")
                unlink("\(dir)/copy2")
            }
            if wants(s, "copy-async") {
                let (r1, m1) = try measuringRSS { try chunksCopy(source, "\(dir)/copy3", size: size) }
                results.add("copy-async/ringio (GiB/s)", r1 / gib, rssMiB: m1)
                let (r2, m2) = try measuringRSS { try plainCopy(source, "\(dir)/copy4", size: size) }
                results.add("copy-async/plain 1 MiB loop (GiB/s)", r2 / gib, rssMiB: m2)
                unlink("\(dir)/copy3")
                unlink("\(dir)/copy4")
            }
            if wants(s, "chunks") {
                // The README's `for try await chunk in channel.chunks()`, at
                // the default high-water mark (1 MiB) and at 64 KiB, beside a
                // read(2) loop of that size.
                for chunk in [1 << 20, 64 << 10] {
                    let name = chunk == 1 << 20 ? "1 MiB" : "64 KiB"
                    results.add("chunks/ringio chunks() \(name) (GiB/s)", try chunksLoop(source, size: size, chunk: chunk) / gib)
                    results.add("chunks/read loop \(name) (GiB/s)", try readLoop(source, size: size, chunk: chunk) / gib)
                }
            }
            if wants(s, "paths") {
                let (r1, m1) = try measuringRSS { try pathChannels(source, size: size, count: s.paths) }
                results.add("paths/ringio (files/s)", r1, rssMiB: m1)
                let (r3, m3) = try measuringRSS { try pathChannelsAwait(source, size: size, count: s.paths) }
                results.add("paths/ringio await (files/s)", r3, rssMiB: m3)
                results.add("paths/open-pread-close (files/s)", openPreadClose(source, size: size, count: s.paths))
            }
            for name in ["log1", "log2", "log3", "log4", "log5"] { unlink("\(dir)/\(name)") }
        }
        print("\n| case | median | min – max | +RSS MiB (median) |")
        print("|---|---:|---:|---:|")
        for label in results.order {
            let v = results.rates[label]!.sorted()
            let m = v[v.count / 2]
            let fmt: (Double) -> String = { label.contains("GiB/s") ? fixed($0, 2) : grouped($0) }
            let rss = results.rss[label].map { r in fixed(r.sorted()[r.count / 2], 0) } ?? ""
            print("| \(label) | \(fmt(m)) | \(fmt(v.first!)) – \(fmt(v.last!)) | \(rss) |")
        }
        print("\nengine: \(RingIOCases.engineDescription); busy threads: \(s.busy); file: \(s.sizeMiB) MiB; rounds: \(s.rounds)")
    }

    // MARK: - inputs and RSS

    static func makeFile(_ path: String, size: Int) throws {
        let fd = try openFile(path, O_WRONLY | O_CREAT | O_TRUNC)
        defer { close(fd) }
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
        defer { block.deallocate() }
        for i in 0..<(1 << 20) { block[i] = UInt8(truncatingIfNeeded: i &* 31 &+ 7) }
        var written = 0
        while written < size {
            let n = write(fd, block.baseAddress, min(1 << 20, size - written))
            guard n > 0 else { throw BenchError("write \(path): errno \(errno)") }
            written += n
        }
        // Cached: read it through once.
        let rfd = try openFile(path, O_RDONLY)
        defer { close(rfd) }
        while read(rfd, block.baseAddress, 1 << 20) > 0 {}
    }

    static func residentMiB() -> Double {
        let fd = open("/proc/self/statm", O_RDONLY)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let n = read(fd, &buffer, 127)
        guard n > 0 else { return 0 }
        let fields = String(decoding: buffer[0..<n], as: UTF8.self).split(separator: " ")
        guard fields.count > 1, let pages = Double(fields[1]) else { return 0 }
        return pages * Double(sysconf(Int32(_SC_PAGESIZE))) / Double(1 << 20)
    }

    /// Runs `body` while a thread samples the resident set every 2 ms:
    /// returns its result and the peak above the resident set before.
    static func measuringRSS(_ body: () throws -> Double) throws -> (Double, Double) {
        let before = residentMiB()
        let peak = Mutex<Double>(before)
        let stop = Atomic<Bool>(false)
        let sampler = Completion()
        DispatchQueue.global().async {
            while !stop.load(ordering: .relaxed) {
                let r = residentMiB()
                peak.withLock { $0 = max($0, r) }
                usleep(2000)
            }
            sampler.finish()
        }
        let rate = try body()
        stop.store(true, ordering: .relaxed)
        try sampler.wait("RSS sampler", timeout: 10)
        let r = residentMiB()
        return (rate, max(peak.withLock { max($0, r) } - before, 0))
    }

    static func offset(_ i: Int, size: Int) -> Int64 { Int64((i &* 4096) % (size - 4096)) }

    // MARK: - reads

    /// The calling thread's CPU time (ns).
    static func threadCPU() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
        return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
    }

    /// The last `readAwait` or `preadLoop`: reads per CPU second of its
    /// thread (0 when the loop changed threads).
    static let lastCPURate = Mutex<Double>(0)

    static func preadLoop(_ path: String, size: Int, reads: Int) -> Double {
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 4096, alignment: 4096)
        defer { buffer.deallocate() }
        let start = now()
        let cpu = threadCPU()
        for i in 0..<reads { _ = pread(fd, buffer, 4096, off_t(offset(i, size: size))) }
        let used = threadCPU() - cpu
        lastCPURate.withLock { $0 = Double(reads) / (Double(used) / 1e9) }
        return Double(reads) / seconds(since: start)
    }

    static func readAwait(_ path: String, size: Int, reads: Int) throws -> Double {
        let done = Completion()
        let rate = Mutex<Double>(0)
        Task {
            do {
                let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: .global)
                _ = try await channel.read(offset: 0, length: 4096)
                let start = now()
                let thread = pthread_self()
                let cpu = threadCPU()
                for i in 0..<reads {
                    let d = try await channel.read(offset: offset(i, size: size), length: 4096)
                    if d.count != 4096 { throw BenchError("short read \(d.count)") }
                }
                let used = threadCPU() - cpu
                let sameThread = pthread_equal(thread, pthread_self()) != 0
                rate.withLock { $0 = Double(reads) / seconds(since: start) }
                lastCPURate.withLock { $0 = sameThread ? Double(reads) / (Double(used) / 1e9) : 0 }
                channel.close()
                done.finish()
            } catch {
                done.finish("\(error)")
            }
        }
        try done.wait("read-await", timeout: 300)
        return rate.withLock { $0 }
    }

    static func readHandler(_ path: String, size: Int, reads: Int) throws -> Double {
        let queue = IOQueue(label: "natural.read")
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue)
        let done = Completion()
        let count = Atomic<Int>(0)
        @Sendable func next() {
            let i = count.add(1, ordering: .relaxed).newValue
            if i > reads { return done.finish() }
            channel.read(offset: offset(i, size: size), length: 4096, queue: queue) { isDone, data, error in
                if let error { return done.finish("\(error)") }
                if isDone { next() }
            }
        }
        let start = now()
        next()
        try done.wait("read-handler", timeout: 300)
        let rate = Double(reads) / seconds(since: start)
        channel.close()
        return rate
    }

    /// fio's t/io_uring, buffered, one read at a time (`-O0 -p0 -d1 -s1 -c1`,
    /// registered file and buffer, random 4 KiB), 3 s: its median per-second
    /// IOPS, and its reads per CPU second (the mean IOPS over the share of
    /// the run it had a CPU: its user and system time ÷ the run's length).
    static func tIoUring(_ tool: String, _ path: String) throws -> (Double, Double) {
        let result = try spawn([tool, "-O0", "-p0", "-d1", "-s1", "-c1", "-b4096", "-R1", "-r3", path], timeout: 30)
        let rates = result.output.split(separator: "\n").compactMap { line -> Double? in
            guard line.hasPrefix("IOPS="), let end = line.firstIndex(of: ",") else { return nil }
            var text = line[line.index(line.startIndex, offsetBy: 5)..<end]
            var scale = 1.0
            if text.hasSuffix("K") { scale = 1e3; text = text.dropLast() }
            if text.hasSuffix("M") { scale = 1e6; text = text.dropLast() }
            return Double(text).map { $0 * scale }
        }
        guard !rates.isEmpty else { throw BenchError("t/io_uring printed no rate: \(result.output.prefix(300))") }
        let mean = rates.reduce(0, +) / Double(rates.count)
        let perCPU = result.cpuSeconds > 0 ? mean * result.seconds / result.cpuSeconds : 0
        return (rates.sorted()[rates.count / 2], perCPU)
    }

    // MARK: - append logs

    static let record = DataChunk(copying: UnsafeRawBufferPointer(UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)))

    static func writeLoop(_ path: String, records: Int, append: Bool) -> Double {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (append ? O_APPEND : 0), 0o644)
        defer { close(fd); unlink(path) }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 4096, alignment: 4096)
        defer { buffer.deallocate() }
        let start = now()
        for _ in 0..<records { _ = write(fd, buffer, 4096) }
        return Double(records) / seconds(since: start)
    }

    static func appendAwait(_ path: String, records: Int) throws -> Double {
        let done = Completion()
        let rate = Mutex<Double>(0)
        Task {
            do {
                let log = try IOChannel(kind: .stream, path: FilePath(path), mode: .writeOnly,
                                        options: [.create, .append], permissions: [.ownerReadWrite], queue: .global)
                let start = now()
                for _ in 0..<records { try await log.write(data: record) }
                rate.withLock { $0 = Double(records) / seconds(since: start) }
                log.close()
                done.finish()
            } catch {
                done.finish("\(error)")
            }
        }
        try done.wait("append-await", timeout: 300)
        try checkSize(path, records * 4096)
        return rate.withLock { $0 }
    }

    static func appendQueued(_ path: String, records: Int, append: Bool) throws -> Double {
        let queue = IOQueue(label: "natural.log")
        let log = try IOChannel(kind: .stream, path: FilePath(path), mode: .writeOnly,
                                options: append ? [.create, .append] : [.create, .truncate],
                                permissions: [.ownerReadWrite], queue: queue)
        let done = Completion()
        let left = Atomic<Int>(records)
        let start = now()
        for _ in 0..<records {
            log.write(data: record, queue: queue) { isDone, _, error in
                if let error { return done.finish("\(error)") }
                if isDone && left.subtract(1, ordering: .relaxed).newValue == 0 { done.finish() }
            }
        }
        try done.wait("append-queued", timeout: 300)
        let rate = Double(records) / seconds(since: start)
        log.close()
        try checkSize(path, records * 4096)
        return rate
    }

    static func checkSize(_ path: String, _ expected: Int) throws {
        var st = stat()
        guard stat(path, &st) == 0, Int(st.st_size) == expected else {
            throw BenchError("\(path): \(st.st_size) bytes, expected \(expected)")
        }
    }

    // MARK: - copies

    /// The README's handler copy, as written there.
    static func copyHandler(_ source: String, _ destination: String, size: Int) throws -> Double {
        let queue = IOQueue(label: "copy")
        let input = try IOChannel(kind: .stream, path: FilePath(source), mode: .readOnly, queue: queue)
        let target = try IOChannel(kind: .stream, path: FilePath(destination), mode: .writeOnly,
                                   options: [.create, .truncate], permissions: [.ownerReadWrite], queue: queue)
        let copied = Completion()
        let start = now()
        input.read(length: .max, queue: queue) { done, data, error in
            if let data, !data.isEmpty {
                target.write(data: data, queue: queue) { _, _, error in if let error { print("write:", error) } }
            }
            if let error { print("read:", error) }
            if done { target.barrier { input.close(); target.close(); copied.finish() } }
        }
        try copied.wait("copy-handler", timeout: 600)
        let rate = Double(size) / seconds(since: start)
        try checkSize(destination, size)
        return rate
    }

    static func plainCopy(_ source: String, _ destination: String, size: Int) throws -> Double {
        let start = now()
        let input = try openFile(source, O_RDONLY)
        let output = try openFile(destination, O_WRONLY | O_CREAT | O_TRUNC)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 4096)
        defer { buffer.deallocate() }
        while true {
            let n = read(input, buffer, 1 << 20)
            if n <= 0 { break }
            var done = 0
            while done < n {
                let w = write(output, buffer + done, n - done)
                if w <= 0 { break }
                done += w
            }
        }
        close(input)
        close(output)
        return Double(size) / seconds(since: start)
    }

    /// The README's async copy, as written there, to the end of its loop
    /// (its `synchronize()`, an fsync, is left out, as the plain loop has none).
    static func chunksCopy(_ source: String, _ destination: String, size: Int) throws -> Double {
        let done = Completion()
        let rate = Mutex<Double>(0)
        Task {
            do {
                let start = now()
                let input = try IOChannel(kind: .stream, path: FilePath(source), mode: .readOnly, queue: .global)
                let target = try IOChannel(kind: .stream, path: FilePath(destination), mode: .writeOnly,
                                           options: [.create, .truncate], permissions: [.ownerReadWrite], queue: .global)
                for try await chunk in input.chunks() {
                    try await target.write(data: chunk)
                }
                rate.withLock { $0 = Double(size) / seconds(since: start) }
                input.close()
                target.close()
                done.finish()
            } catch {
                done.finish("\(error)")
            }
        }
        try done.wait("copy-async", timeout: 600)
        try checkSize(destination, size)
        return rate.withLock { $0 }
    }

    // MARK: - chunks()

    /// `for try await chunk in channel.chunks()` over the whole file, on a
    /// stream path channel whose high-water mark is `chunk` (1 MiB: the default).
    static func chunksLoop(_ path: String, size: Int, chunk: Int) throws -> Double {
        let done = Completion()
        let rate = Mutex<Double>(0)
        Task {
            do {
                let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: .global)
                if chunk != 1 << 20 { channel.setHighWater(chunk) }
                let start = now()
                var total = 0
                for try await data in channel.chunks() { total += data.count }
                if total != size { throw BenchError("chunks() read \(total) of \(size) bytes") }
                rate.withLock { $0 = Double(size) / seconds(since: start) }
                channel.close()
                done.finish()
            } catch {
                done.finish("\(error)")
            }
        }
        try done.wait("chunks", timeout: 600)
        return rate.withLock { $0 }
    }

    /// A `read(2)` loop of `chunk` bytes over the whole file.
    static func readLoop(_ path: String, size: Int, chunk: Int) throws -> Double {
        let start = now()
        let fd = try openFile(path, O_RDONLY)
        defer { close(fd) }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 4096)
        defer { buffer.deallocate() }
        var total = 0
        while true {
            let n = read(fd, buffer, chunk)
            if n <= 0 { break }
            total += n
        }
        if total != size { throw BenchError("read loop read \(total) of \(size) bytes") }
        return Double(size) / seconds(since: start)
    }

    // MARK: - path channels

    static func pathChannels(_ path: String, size: Int, count: Int) throws -> Double {
        let queue = IOQueue(label: "natural.paths")
        let done = Completion()
        let left = Atomic<Int>(count)
        let start = now()
        for i in 0..<count {
            let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue)
            channel.read(offset: offset(i, size: size), length: 4096, queue: queue) { isDone, _, error in
                if let error { return done.finish("\(error)") }
                if isDone {
                    channel.close()
                    if left.subtract(1, ordering: .relaxed).newValue == 0 { done.finish() }
                }
            }
        }
        try done.wait("paths", timeout: 300)
        return Double(count) / seconds(since: start)
    }

    /// The same with `try await channel.read(...)` from a plain task, then `close()`.
    static func pathChannelsAwait(_ path: String, size: Int, count: Int) throws -> Double {
        let done = Completion()
        let rate = Mutex<Double>(0)
        Task {
            do {
                let start = now()
                for i in 0..<count {
                    let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: .global)
                    let d = try await channel.read(offset: offset(i, size: size), length: 4096)
                    if d.count != 4096 { throw BenchError("short read \(d.count)") }
                    channel.close()
                }
                rate.withLock { $0 = Double(count) / seconds(since: start) }
                done.finish()
            } catch {
                done.finish("\(error)")
            }
        }
        try done.wait("paths-await", timeout: 300)
        return rate.withLock { $0 }
    }

    static func openPreadClose(_ path: String, size: Int, count: Int) -> Double {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 4096, alignment: 4096)
        defer { buffer.deallocate() }
        let start = now()
        for i in 0..<count {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            _ = pread(fd, buffer, 4096, off_t(offset(i, size: size)))
            close(fd)
        }
        return Double(count) / seconds(since: start)
    }
}
