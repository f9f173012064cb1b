// Every system for every workload, with the untimed setup and the check
// around each timed run.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport

/// Short names of the systems, for the chart.
let systemNames: [String: String] = [
    "ringio": "RingIO handler API",
    "ringio-async": "RingIO async API",
    "dispatchio": "DispatchIO",
    "nio": "NIO FileSystem",
    "nio-chunks": "NIO FileSystem readChunks",
    "nio-copyitem": "NIO FileSystem copyItem",
    "nio-nbfio": "NIO NonBlockingFileIO",
    "plain": "plain syscall loop",
    "cp": "cp",
    "ringcp": "ringcp",
    "fio": "fio io_uring",
    "ringio-async-ring": "RingIO async API on IOEngine.queue",
    "ringio-ring": "RingIO handler API on IOEngine.queue",
    "foundation": "Foundation Data(contentsOf:)",
]

/// What the cases share: the inputs and the tools found.
@MainActor
final class Bench {
    let options: Options
    let workspace: Workspace
    let sums: SourceSums
    let offsets: [Int64]
    let log: AppendLog
    let fio: Fio?
    let cp: String?
    let timeout: Double
    /// The page cache is dropped before each measurement.
    let cold: Bool
    /// How many random reads the slower systems make (their rate is per read, so fewer suffice).
    let slowReads: Int
    /// The checksum of the `readfile` workload's files.
    let readFileSums: UInt64
    /// Small-file copies made so far (each into a directory of its own).
    private var treeCopies = 0

    init(options: Options, workspace: Workspace, sums: SourceSums, readFileSums: UInt64, fio: Fio?, cold: Bool) {
        self.options = options
        self.readFileSums = readFileSums
        self.workspace = workspace
        self.sums = sums
        self.fio = fio
        self.cold = cold
        offsets = randomOffsets(count: options.reads, size: options.size)
        log = AppendLog(recordSize: options.logRecord, totalBytes: options.logBytes)
        cp = which("cp")
        timeout = max(60, Double(max(options.size, options.logBytes)) / Double(50 << 20))
        slowReads = min(options.reads, 20_000)
    }

    var size: Int { options.size }
    var source: String { workspace.source }

    /// Every case, in the order of the tables.
    func cases() -> [Case] {
        var all = readCases() + copyCases() + randomCases(depth: 32) + randomCases(depth: 1)
        all += fileCases() + readFileCases()
        all += copyFileCases() + appendCases()
        return all
    }

    private func readCases() -> [Case] {
        let (source, size, timeout, expected) = (source, size, timeout, sums.whole)
        var cases = [
            Case(workload: .read, system: "ringio", label: "RingIO IOChannel stream, handler", check: .checksum) {
                try RingIOCases.sequentialRead(source, size: size, expected: expected, timeout: timeout)
            },
            Case(workload: .read, system: "ringio-async", label: "RingIO IOChannel chunks(), async", check: .checksum) {
                try RingIOCases.sequentialReadAsync(source, size: size, expected: expected, timeout: timeout)
            },
            Case(workload: .read, system: "dispatchio", label: "DispatchIO stream", check: .checksum) {
                try DispatchIOCases.sequentialRead(source, size: size, expected: expected, timeout: timeout)
            },
            Case(workload: .read, system: "nio", label: "SwiftNIO FileSystem readChunks (1 MiB)", check: .checksum) {
                try NIOCases.sequentialRead(source, size: size, expected: expected, timeout: timeout)
            },
            Case(workload: .read, system: "nio-nbfio", label: "SwiftNIO NonBlockingFileIO readChunked (1 MiB)", check: .checksum) {
                try NonBlockingFileIOCases.sequentialRead(source, size: size, expected: expected, timeout: timeout)
            },
            Case(workload: .read, system: "plain", label: "read(2) loop, 1 MiB buffer", check: .checksum) {
                try PlainCases.sequentialRead(source, size: size, expected: expected)
            },
        ]
        if let fio {
            cases.append(Case(workload: .read, system: "fio", label: "fio io_uring, 8 × 1 MiB in flight", check: .count) {
                try fio.sequentialRead(source, size: size, timeout: timeout)
            })
        }
        return cases
    }

    private func copyCases() -> [Case] {
        var copies: [(system: String, label: String)] = [
            ("ringio", "RingIO stream read → stream write"),
            ("ringio-async", "RingIO IO.copyFile (chunks → await write)"),
            ("dispatchio", "DispatchIO stream read → stream write"),
            ("nio-chunks", "SwiftNIO FileSystem readChunks → write (1 MiB)"),
            ("nio-copyitem", "SwiftNIO FileSystem copyItem (sendfile)"),
            ("nio-nbfio", "SwiftNIO NonBlockingFileIO readChunked → write (1 MiB)"),
            ("plain", "read/write loop, 1 MiB buffer"),
        ]
        if cp != nil { copies.append(("cp", "cp (coreutils)")) }
        if options.ringcp != nil { copies.append(("ringcp", "ringcp")) }
        return copies.map { copy in
            Case(workload: .copy, system: copy.system, label: copy.label, check: .identical) { [unowned self] in
                try copyInChild(copy.system)
            }
        }
    }

    /// Runs one copy in a child process, checks the copy, and returns the
    /// child's peak RSS and minor faults with the rate. The copies in Swift
    /// report their own peak (VmHWM); cp and ringcp run under `child exec`,
    /// which forks them.
    private func copyInChild(_ system: String) throws -> Sample {
        let destination = workspace.destination(system)
        unlink(destination)
        defer { unlink(destination) }
        // An untimed copy first, deleted at once, so that the timed one writes
        // into pages just freed. A VM whose balloon reports free pages to the host
        // (as here) takes them back after a second or two, and the next copy then
        // pays a host fault per page: several times slower, whatever copies.
        try PlainCases.copy(source, workspace.destination("warm-up"))
        unlink(workspace.destination("warm-up"))
        try prepareSource()
        let argv: [String]
        switch system {
        case "cp": argv = [selfPath, "child", "exec", cp!, source, destination]
        case "ringcp": argv = [selfPath, "child", "exec", options.ringcp!, source, destination]
        default: argv = [selfPath, "child", "copy-\(system)", source, destination, "\(timeout)"]
        }
        let child = try spawn(argv, timeout: timeout + 10)
        guard child.exitedCleanly else { throw BenchError("copy-\(system) child: \(child.statusDescription)") }
        let values = keyValues(child.output)
        guard let elapsed = values["seconds"], let peak = values["peak_kib"] else {
            throw BenchError("copy-\(system) child printed no measurement: \(child.output)")
        }
        try requireIdentical(source, destination)
        return Sample(rate: Double(size) / elapsed, peakRSSMiB: peak / 1024,
                      minorFaults: values["minflt"] ?? Double(child.minorFaults))
    }

    private func randomCases(depth: Int) -> [Case] {
        let workload: Workload = depth == 1 ? .random1 : .random32
        let (source, size, timeout) = (source, size, timeout)
        let all = offsets, few = Array(offsets.prefix(slowReads))
        let (expectAll, expectFew) = (sums.reads(at: all), sums.reads(at: few))
        let inFlight = depth == 1 ? "1 in flight" : "\(depth) in flight"
        var cases = [
            Case(workload: workload, system: "ringio", label: "RingIO IOChannel random, handler, \(inFlight)", check: .checksum) {
                try RingIOCases.randomReads(source, offsets: all, depth: depth, expected: expectAll, timeout: timeout)
            },
            Case(workload: workload, system: "ringio-async", label: "RingIO IOChannel random, async read, \(inFlight)", check: .checksum) {
                try RingIOCases.randomReadsAsync(source, offsets: all, depth: depth, expected: expectAll, timeout: timeout)
            },
            Case(workload: workload, system: "ringio-ring", label: "RingIO IOChannel random, handler on IOEngine.queue, \(inFlight)", check: .checksum) {
                try RingIOCases.randomReads(source, offsets: all, depth: depth, expected: expectAll, timeout: timeout, onRing: true)
            },
            Case(workload: workload, system: "ringio-async-ring", label: "RingIO IOChannel random, async read on IOEngine.queue, \(inFlight)", check: .checksum) {
                try RingIOCases.randomReadsAsync(source, offsets: all, depth: depth, expected: expectAll, timeout: timeout, onRing: true)
            },
            Case(workload: workload, system: "dispatchio", label: "DispatchIO random, \(inFlight)", check: .checksum) {
                try DispatchIOCases.randomReads(source, offsets: few, depth: depth, expected: expectFew, timeout: timeout)
            },
            Case(workload: workload, system: "nio", label: "SwiftNIO FileSystem readChunk, \(inFlight)", check: .checksum) {
                try NIOCases.randomReads(source, offsets: few, depth: depth, expected: expectFew, timeout: timeout)
            },
            Case(workload: workload, system: "nio-nbfio", label: "SwiftNIO NonBlockingFileIO read, \(inFlight)" + (depth > 1 ? " (a handle each)" : ""), check: .checksum) {
                try NonBlockingFileIOCases.randomReads(source, offsets: few, depth: depth, expected: expectFew, timeout: timeout)
            },
        ]
        if depth == 1 {
            cases.append(Case(workload: workload, system: "plain", label: "pread loop", check: .checksum) {
                try PlainCases.randomReads(source, offsets: all, expected: expectAll)
            })
        }
        if let fio {
            let count = all.count
            cases.append(Case(workload: workload, system: "fio", label: "fio io_uring, \(inFlight)", check: .count) {
                try fio.randomReads(source, size: size, count: count, depth: depth, timeout: timeout)
            })
        }
        return cases
    }

    private func fileCases() -> [Case] {
        let count = options.files
        var cases = [
            Case(workload: .files, system: "ringio-async", label: "RingIO IO.copyFile, \(filesInFlight) files at once", check: .identical) {
                [unowned self] in
                try copyTree("ringio-async", create: true) { source, destination in
                    try RingIOCases.copyFiles(source, destination, count: count, timeout: timeout)
                }
            },
            Case(workload: .files, system: "dispatchio", label: "DispatchIO read → write, \(filesInFlight) files at once", check: .identical) {
                [unowned self] in
                try copyTree("dispatchio", create: true) { source, destination in
                    try DispatchIOCases.copyFiles(source, destination, count: count, timeout: timeout)
                }
            },
            Case(workload: .files, system: "nio", label: "SwiftNIO FileSystem copyItem (directory)", check: .identical) {
                [unowned self] in
                try copyTree("nio", create: false) { source, destination in
                    let start = now()
                    try NIOCases.copyItem(source, destination, timeout: timeout)
                    return seconds(since: start)
                }
            },
            Case(workload: .files, system: "plain", label: "open/read/write/close loop", check: .identical) {
                [unowned self] in
                try copyTree("plain", create: true) { source, destination in
                    try PlainCases.copyFiles(source, destination, count: count)
                }
            },
        ]
        var tools: [(system: String, label: String, path: String)] = []
        if let cp { tools.append(("cp", "cp -r (coreutils)", cp)) }
        if let ringcp = options.ringcp { tools.append(("ringcp", "ringcp -r", ringcp)) }
        for tool in tools {
            cases.append(Case(workload: .files, system: tool.system, label: tool.label, check: .identical) { [unowned self] in
                try copyTree(tool.system, create: false) { source, destination in
                    let run = try forkExec([tool.path, "-r", source, destination])
                    guard run.status == 0 else { throw BenchError("\(tool.label): \(describeWaitStatus(run.status))") }
                    return run.seconds
                }
            })
        }
        return cases
    }

    /// Copies the small files' directory to a new one with `copy` (which
    /// returns the seconds it took) and checks every file. The copy stays
    /// until the workspace goes: on ext4, creating files right after deleting
    /// thousands is slow for a while, which would time the deletion of the
    /// previous system's copy rather than this system's.
    func copyTree(_ system: String, from source: String? = nil, create: Bool,
                  _ copy: (String, String) throws -> Double) throws -> Sample {
        let source = source ?? workspace.smallFiles
        treeCopies += 1
        let destination = workspace.destinationTree("\(system)-\(treeCopies)")
        removeTree(destination)
        if create { guard mkdir(destination, 0o755) == 0 else { throw BenchError("mkdir \(destination): errno \(errno)") } }
        try prepareSource(big: false)
        let elapsed = try copy(source, destination)
        try requireIdenticalTrees(source, destination)
        return Sample(rate: Double(options.files) / elapsed)
    }

    private func readFileCases() -> [Case] {
        let (dir, count, timeout) = (workspace.readFiles, options.files, timeout)
        let expected = readFileSums
        let evict = options.evictPages
        func checked(_ what: String, _ run: () throws -> (seconds: Double, sums: UInt64)) throws -> Sample {
            try prepareSource(big: false)
            if evict { try ReadFileCases.evictPages(dir, count: count) }
            let result = try run()
            guard result.sums == expected else { throw BenchError("\(what): wrong bytes (checksum differs)") }
            return Sample(rate: Double(count) / result.seconds)
        }
        return [
            Case(workload: .readfile, system: "ringio-async", label: "RingIO IO.readFile, from a task", check: .checksum) {
                try checked("IO.readFile") { try ReadFileCases.ringio(dir, count: count, onRing: false, timeout: timeout) }
            },
            Case(workload: .readfile, system: "ringio-async-ring", label: "RingIO IO.readFile, from a task on IOEngine.queue", check: .checksum) {
                try checked("IO.readFile on the ring") { try ReadFileCases.ringio(dir, count: count, onRing: true, timeout: timeout) }
            },
            Case(workload: .readfile, system: "foundation", label: "Foundation Data(contentsOf:)", check: .checksum) {
                try checked("Data(contentsOf:)") { try ReadFileCases.foundation(dir, count: count) }
            },
            Case(workload: .readfile, system: "plain", label: "open/fstat/read/close loop", check: .checksum) {
                try checked("read loop") { try ReadFileCases.plain(dir, count: count) }
            },
        ]
    }

    private func appendCases() -> [Case] {
        let (log, timeout) = (log, timeout)
        var cases = [
            Case(workload: .append, system: "ringio", label: "RingIO stream write channel, handler, all queued", check: .log) {
                [unowned self] in try appendLog("ringio") { try RingIOCases.appendLog($0, log: log, timeout: timeout) }
            },
            Case(workload: .append, system: "ringio-async", label: "RingIO stream channel, await write each", check: .log) {
                [unowned self] in try appendLog("ringio-async") { try RingIOCases.appendLogAsync($0, log: log, timeout: timeout) }
            },
            Case(workload: .append, system: "dispatchio", label: "DispatchIO stream write channel, all queued", check: .log) {
                [unowned self] in try appendLog("dispatchio") { try DispatchIOCases.appendLog($0, log: log, timeout: timeout) }
            },
            Case(workload: .append, system: "nio", label: "SwiftNIO FileSystem write, await each", check: .log) {
                [unowned self] in try appendLog("nio") { try NIOCases.appendLog($0, log: log, timeout: timeout) }
            },
            Case(workload: .append, system: "nio-nbfio", label: "SwiftNIO NonBlockingFileIO write, await each", check: .log) {
                [unowned self] in try appendLog("nio-nbfio") { try NonBlockingFileIOCases.appendLog($0, log: log, timeout: timeout) }
            },
            Case(workload: .append, system: "plain", label: "write(2) loop", check: .log) {
                [unowned self] in try appendLog("plain") { try PlainCases.appendLog($0, log: log) }
            },
        ]
        if let fio {
            cases.append(Case(workload: .append, system: "fio", label: "fio io_uring, 8 in flight, end fsync", check: .count) {
                [unowned self] in try appendLog("fio", verify: false) { try fio.appendLog($0, log: log, timeout: timeout) }
            })
        }
        return cases
    }

    /// Writes the log to a new file with `write` (which returns the seconds
    /// it took, its fsync included), checks it, and removes it.
    private func appendLog(_ system: String, verify: Bool = true, _ write: (String) throws -> Double) throws -> Sample {
        let path = workspace.log(system)
        unlink(path)
        defer { unlink(path) }
        sync()  // the previous system's dirty pages are not this one's to write
        let elapsed = try write(path)
        if verify { try log.verify(path) }
        return Sample(rate: Double(log.totalBytes) / elapsed)
    }

    /// Measurements that found part of the source evicted from the page
    /// cache (and read it back in first, untimed), and all measurements.
    private(set) var evictions = 0
    private(set) var measurements = 0

    /// Just before a measurement reads its input: the page cache dropped
    /// (`--cold`), or else the source read back in where part of it was
    /// evicted (`big`: the 1 GiB source; otherwise the small files, which
    /// were just written or read).
    func prepareSource(big: Bool = true) throws {
        measurements += 1
        if cold {
            if let failure = PageCache.drop() { throw BenchError("--cold: \(failure)") }
        } else if big, try residentFraction(source) < 1 {
            evictions += 1
            try readThrough(source)
        }
    }
}
