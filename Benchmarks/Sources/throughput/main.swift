// throughput: RingIO's IOChannel beside the systems a user would otherwise
// pick, on the same files in the same run.
//
//   swift run -c release --package-path Benchmarks throughput \
//       [--size-mib 1024] [--dir DIR] [--rounds 3] [--reads 200000] [--only NAME[,NAME...]]
//
// 1. Sequential read of a page-cached file to EOF (GiB/s): RingIO stream
//    channel, DispatchIO stream channel, SwiftNIO readChunks, a read(2) loop,
//    fio (io_uring, 8 × 1 MiB in flight).
// 2. Copy file → file (GiB/s): RingIO and DispatchIO as a stream read channel
//    whose handler writes each chunk to a stream write channel (at most
//    `copyWindowBytes` outstanding), SwiftNIO readChunks → write and
//    copyItem, a read/write loop, cp. Each copy runs in a child process (this
//    binary again: `throughput child copy-NAME SRC DST TIMEOUT`; cp under
//    `throughput child exec`), which also gives
// 4. its peak RSS and minor page faults. Every copy is compared with the source.
// 3. Random 4 KiB reads of the cached file, fixed seed (reads/s): RingIO and
//    DispatchIO random channels with 32 in flight (DispatchIO's count capped),
//    fio (io_uring, 32 in flight), a pread loop (one at a time).
//
// Systems alternate within each round (the order rotates from round to
// round); the table gives medians of the rounds, min – max, and each system's
// time over RingIO's. `--only` keeps the cases whose "section/system" name
// contains one of the given words: read, copy, random; ringio, dispatchio,
// nio, plain, cp, fio.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport

// `throughput direct ...`: cold-cache, range-read and registered-resource cases (DirectCases.swift).
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "direct" {
    DirectBench.main(Array(CommandLine.arguments.dropFirst(2)))
}

// MARK: - child process: one copy, timed and measured from the inside

if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "child" {
    let args = Array(CommandLine.arguments.dropFirst(2))
    do {
        switch args.first {
        case "baseline":
            print("seconds=0 peak_kib=\(peakResidentKiB())")
        case "exec" where args.count >= 2:
            // For a program that cannot report its own peak (cp): fork, exec, wait4.
            let run = try forkExec(Array(args.dropFirst()))
            print("seconds=\(run.seconds) peak_kib=\(run.usage.ru_maxrss) minflt=\(run.usage.ru_minflt)")
            guard run.status == 0 else { throw BenchError("\(args[1]): \(describeWaitStatus(run.status))") }
        case let job? where job.hasPrefix("copy-") && args.count == 4:
            let (source, destination, timeout) = (args[1], args[2], Double(args[3]) ?? 60)
            let start = now()
            switch job.dropFirst(5) {
            case "ringio": try RingIOCases.copy(source, destination, timeout: timeout)
            case "ringio-async": try RingIOCases.copyAsync(source, destination, timeout: timeout)
            case "dispatchio": try DispatchIOCases.copy(source, destination, timeout: timeout)
            case "nio-chunks": try NIOCases.copyChunks(source, destination, timeout: timeout)
            case "nio-copyitem": try NIOCases.copyItem(source, destination, timeout: timeout)
            case "plain": try PlainCases.copy(source, destination)
            default: throw BenchError("unknown copy \(job)")
            }
            print("seconds=\(seconds(since: start)) peak_kib=\(peakResidentKiB())")
        default:
            throw BenchError("usage: throughput child (baseline | exec PATH ARGS... | copy-NAME SRC DST TIMEOUT)")
        }
        exit(0)
    } catch {
        progress("throughput child \(args.joined(separator: " ")): \(error)")
        exit(1)
    }
}

// MARK: - options

var sizeMiB = 1024
var directory: String? = nil
var rounds = 3
var reads = 200_000
var only: [String] = []
var options = CommandLine.arguments.dropFirst().makeIterator()
while let option = options.next() {
    switch option {
    case "--size-mib": sizeMiB = Int(options.next() ?? "") ?? 0
    case "--dir": directory = options.next()
    case "--rounds": rounds = Int(options.next() ?? "") ?? 0
    case "--reads": reads = Int(options.next() ?? "") ?? 0
    case "--only": only += (options.next() ?? "").lowercased().split(separator: ",").map(String.init)
    default:
        print("usage: throughput [--size-mib N (1024)] [--dir DIR ($TMPDIR or /tmp)] [--rounds N (3)] [--reads N (200000)] [--only NAME[,NAME...]]")
        exit(option == "--help" || option == "-h" ? 0 : 2)
    }
}
guard sizeMiB >= 1, rounds >= 1, reads >= 1 else {
    print("throughput: --size-mib, --rounds and --reads take positive numbers")
    exit(2)
}

// MARK: - cases

enum Section: String, CaseIterable {
    case read, copy, random
}

struct Case {
    let section: Section
    let system: String
    let label: String
    let measure: @MainActor () throws -> Sample
    var key: String { "\(section.rawValue)/\(system)" }
}

/// What one copy child measured.
struct CopyUsage {
    var rssMiB: Double
    var minorFaults: Double
}

let size = sizeMiB << 20
let timeout = max(60, Double(size) / Double(50 << 20))
let depth = 32
let dispatchReads = min(reads, 20_000)
let fio = Fio.locate()
let cp = which("cp")

let workspace: Workspace
do {
    workspace = try Workspace(parent: directory, size: size)
} catch {
    print("throughput: \(error)")
    exit(1)
}
let offsets = randomOffsets(count: reads, size: size)

var usage: [String: [CopyUsage]] = [:]

/// Runs one copy in a child process, checks the copy, and records the
/// child's peak RSS and minor faults under `system`. The copies in Swift
/// report their own peak (VmHWM); cp runs under `child exec`, which forks it.
@MainActor func copyInChild(_ system: String) throws -> Sample {
    let destination = workspace.destination(system)
    unlink(destination)
    defer { unlink(destination) }
    // An untimed copy first, deleted at once, so that the timed one writes
    // into pages just freed. A VM whose balloon reports free pages to the host
    // (as here) takes them back after a second or two, and the next copy then
    // pays a host fault per page: several times slower, whatever copies.
    try PlainCases.copy(workspace.source, workspace.destination("warm-up"))
    unlink(workspace.destination("warm-up"))
    let argv = system == "cp"
        ? [selfPath, "child", "exec", cp!, workspace.source, destination]
        : [selfPath, "child", "copy-\(system)", workspace.source, destination, "\(timeout)"]
    let child = try spawn(argv, timeout: timeout + 10)
    guard child.exitedCleanly else { throw BenchError("copy-\(system) child: \(child.statusDescription)") }
    let values = keyValues(child.output)
    guard let elapsed = values["seconds"], let peak = values["peak_kib"] else {
        throw BenchError("copy-\(system) child printed no measurement: \(child.output)")
    }
    try requireIdentical(workspace.source, destination)
    usage[system, default: []].append(CopyUsage(rssMiB: peak / 1024, minorFaults: values["minflt"] ?? Double(child.minorFaults)))
    return Sample(rate: Double(size) / elapsed)
}

let source = workspace.source
var cases: [Case] = [
    Case(section: .read, system: "ringio", label: "RingIO IOChannel stream, handler") {
        try RingIOCases.sequentialRead(source, size: size, timeout: timeout)
    },
    Case(section: .read, system: "dispatchio", label: "DispatchIO stream") {
        try DispatchIOCases.sequentialRead(source, size: size, timeout: timeout)
    },
    Case(section: .read, system: "nio", label: "SwiftNIO readChunks (1 MiB)") {
        try NIOCases.sequentialRead(source, size: size, timeout: timeout)
    },
    Case(section: .read, system: "plain", label: "read(2) loop, 1 MiB buffer") {
        try PlainCases.sequentialRead(source, size: size)
    },
]
if let fio {
    cases.append(Case(section: .read, system: "fio", label: "fio io_uring, 8 × 1 MiB in flight") {
        try fio.sequentialRead(source, size: size, timeout: timeout)
    })
}
let copies: [(system: String, label: String)] = [
    ("ringio", "RingIO stream read → stream write"),
    ("ringio-async", "RingIO IO.copyFile (chunks → await write)"),
    ("dispatchio", "DispatchIO stream read → stream write"),
    ("nio-chunks", "SwiftNIO readChunks → write (1 MiB)"),
    ("nio-copyitem", "SwiftNIO copyItem (sendfile)"),
    ("plain", "read/write loop, 1 MiB buffer"),
] + (cp == nil ? [] : [("cp", "cp (coreutils)")])
for copy in copies {
    cases.append(Case(section: .copy, system: copy.system, label: copy.label) { try copyInChild(copy.system) })
}
cases += [
    Case(section: .random, system: "ringio", label: "RingIO IOChannel random, 32 in flight") {
        try RingIOCases.randomReads(source, offsets: offsets, depth: depth, timeout: timeout)
    },
    Case(section: .random, system: "dispatchio", label: "DispatchIO random, 32 in flight") {
        try DispatchIOCases.randomReads(source, offsets: Array(offsets.prefix(dispatchReads)), depth: depth, timeout: timeout)
    },
    Case(section: .random, system: "plain", label: "pread loop, 1 in flight") {
        try PlainCases.randomReads(source, offsets: offsets)
    },
]
if let fio {
    cases.append(Case(section: .random, system: "fio", label: "fio io_uring, 32 in flight") {
        try fio.randomReads(source, size: size, count: reads, timeout: timeout)
    })
}
if !only.isEmpty {
    cases = cases.filter { c in only.contains { c.key.contains($0) } }
    guard !cases.isEmpty else {
        print("throughput: --only \(only.joined(separator: ",")) matches none of: " + (Section.allCases.map(\.rawValue) + ["ringio", "dispatchio", "nio", "plain", "cp", "fio"]).joined(separator: ", "))
        exit(2)
    }
}

// MARK: - run

var rates: [String: [Double]] = [:]
var notes: [String: String] = [:]
var failures: [String: String] = [:]

func loadAverage() -> String {
    guard let file = fopen("/proc/loadavg", "r") else { return "?" }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 128)
    guard fgets(&buffer, Int32(buffer.count), file) != nil else { return "?" }
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return text.split(separator: " ").prefix(3).joined(separator: " ")
}

func uname() -> String {
    var u = utsname()
    Glibc.uname(&u)
    return withUnsafeBytes(of: u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
}

let loadBefore = loadAverage()
progress("throughput: generating \(sizeMiB) MiB in \(workspace.dir)")
do {
    try generate(source, size: size)
    try readThrough(source)
} catch {
    print("throughput: \(error)")
    workspace.remove()
    exit(1)
}

let ringEngine = cases.contains { $0.system == "ringio" } ? RingIOCases.engineDescription : nil
/// What a child costs before it copies anything: this binary doing nothing,
/// and `true` started the way cp is.
var baselines: [(label: String, usage: CopyUsage)] = []
if cases.contains(where: { $0.section == .copy }) {
    for (label, argv) in [("(this binary, doing nothing)", [selfPath, "child", "baseline"]),
                          ("(true, started like cp)", [selfPath, "child", "exec", which("true") ?? "/bin/true"])] {
        if let child = try? spawn(argv, timeout: 30), child.exitedCleanly {
            let values = keyValues(child.output)
            baselines.append((label, CopyUsage(rssMiB: (values["peak_kib"] ?? 0) / 1024,
                                               minorFaults: values["minflt"] ?? Double(child.minorFaults))))
        }
    }
}

/// Measurements, and how many of them found part of the source evicted from
/// the page cache (and read it back in first, untimed).
var measurements = 0
var evictions = 0
for round in 1...rounds {
    for section in Section.allCases {
        let inSection = cases.filter { $0.section == section }
        guard !inSection.isEmpty else { continue }
        let shift = (round - 1) % inSection.count
        for c in inSection[shift...] + inSection[..<shift] where failures[c.key] == nil {
            do {
                measurements += 1
                if try residentFraction(source) < 1 {
                    evictions += 1
                    try readThrough(source)
                }
                let sample = try c.measure()
                rates[c.key, default: []].append(sample.rate)
                if let note = sample.note { notes[c.key] = note }
                let shown = section == .random ? grouped(sample.rate) + " reads/s" : fixed(sample.rate / gib, 2) + " GiB/s"
                progress("round \(round)/\(rounds) \(c.key): \(shown)")
            } catch {
                failures[c.key] = "\(error)"
                progress("round \(round)/\(rounds) \(c.key): FAILED: \(error)")
            }
        }
    }
}
workspace.remove()
let loadAfter = loadAverage()

// MARK: - report

/// Median of a key's rounds with min – max, and its time over RingIO's.
@MainActor func row(_ c: Case, scale: Double, format: (Double) -> String) -> [String] {
    guard let xs = rates[c.key], failures[c.key] == nil else {
        return [c.label, "failed", "", ""]
    }
    let ring = rates["\(c.section.rawValue)/ringio"].flatMap { failures["\(c.section.rawValue)/ringio"] == nil ? median($0) : nil }
    let ratio = ring.map { fixed($0 / median(xs), 2) + "×" } ?? "—"
    return [c.label, format(median(xs) / scale), format(xs.min()! / scale) + " – " + format(xs.max()! / scale), ratio]
}

func table(_ header: [String], _ rows: [[String]]) {
    let widths = header.indices.map { i in ([header[i]] + rows.map { $0[i] }).map(\.count).max()! }
    func line(_ cells: [String]) -> String {
        "| " + cells.enumerated().map { i, cell in i == 0 ? pad(cell, widths[i]) : lpad(cell, widths[i]) }.joined(separator: " | ") + " |"
    }
    print(line(header))
    print("|" + widths.enumerated().map { i, w in i == 0 ? String(repeating: "-", count: w + 2) : String(repeating: "-", count: w + 1) + ":" }.joined(separator: "|") + "|")
    for r in rows { print(line(r)) }
}

func goal(_ text: String, _ value: Double?, _ shown: (Double) -> String, met: (Double) -> Bool) {
    guard let value else { print("- goal: \(text): not measured"); return }
    print("- goal: \(text): \(shown(value)) — " + (met(value) ? "met" : "NOT met"))
}

@MainActor func medianRate(_ key: String) -> Double? {
    failures[key] == nil ? rates[key].map(median) : nil
}

print("""

## RingIO throughput: \(grouped(Double(sizeMiB))) MiB file, \(rounds) round\(rounds == 1 ? "" : "s"), median (min – max)

\(sysconf(Int32(_SC_NPROCESSORS_ONLN))) cores (load average \(loadBefore) before, \(loadAfter) after), Linux \(uname()), \
\(workspace.filesystem); RingIO engine: \(ringEngine ?? "not used"); \(fio?.version ?? "fio not installed (its rows are skipped)"). \
Ratio: the system's time over RingIO's (above 1: RingIO is faster).
""")
if evictions > 0 {
    print("\nThe source was partly evicted from the page cache before \(evictions) of \(measurements) measurements and read back in first (untimed).")
}

let readCases = cases.filter { $0.section == .read }
if !readCases.isEmpty {
    print("\n### Sequential read to EOF, page-cached\n")
    table(["system", "GiB/s", "min – max", "÷ RingIO"], readCases.map { row($0, scale: gib) { fixed($0, 2) } })
}

let copyCases = cases.filter { $0.section == .copy }
if !copyCases.isEmpty {
    print("\n### Copy file → file, each in a child process: peak RSS (VmHWM; cp: wait4 after fork) and minor faults\n")
    print("""
        RingIO and DispatchIO keep at most \(copyWindowBytes >> 20) MiB of writes outstanding (the read handler waits). \
        Each timed copy follows an untimed one, deleted just before (page-cache pages freed earlier may be back with the VM's host).

        """)
    var rows = copyCases.map { c -> [String] in
        var r = row(c, scale: gib) { fixed($0, 2) }
        if let u = usage[c.system], failures[c.key] == nil {
            r += [fixed(median(u.map(\.rssMiB)), 1), grouped(median(u.map(\.minorFaults)) / (Double(size) / gib))]
        } else {
            r += ["", ""]
        }
        return r
    }
    for baseline in baselines {
        rows.append([baseline.label, "", "", "", fixed(baseline.usage.rssMiB, 1), grouped(baseline.usage.minorFaults) + " in all"])
    }
    table(["system", "GiB/s", "min – max", "÷ RingIO", "peak RSS MiB", "minor faults/GiB"], rows)
    print("")
    let ring = medianRate("copy/ringio")
    let ringUsage = failures["copy/ringio"] == nil ? usage["ringio"] : nil
    goal("RingIO's time ≤ 1.1 × the read/write loop's", ring.flatMap { r in medianRate("copy/plain").map { $0 / r } },
         { fixed($0, 2) + "×" }, met: { $0 <= 1.1 })
    goal("RingIO ≥ 3× faster than DispatchIO", ring.flatMap { r in medianRate("copy/dispatchio").map { r / $0 } },
         { fixed($0, 2) + "×" }, met: { $0 >= 3 })
    goal("RingIO's peak RSS ≤ 64 MiB", ringUsage.map { median($0.map(\.rssMiB)) }, { fixed($0, 1) + " MiB" }, met: { $0 <= 64 })
    goal("RingIO ≤ 5,000 minor faults/GiB", ringUsage.map { median($0.map(\.minorFaults)) / (Double(size) / gib) },
         { grouped($0) }, met: { $0 <= 5000 })
}

let randomCases = cases.filter { $0.section == .random }
if !randomCases.isEmpty {
    print("\n### Random 4 KiB reads, page-cached, fixed seed\n")
    table(["system", "reads/s", "min – max", "÷ RingIO"], randomCases.map { row($0, scale: 1) { grouped($0) } })
}

let noted = cases.filter { notes[$0.key] != nil || failures[$0.key] != nil }
if !noted.isEmpty {
    print("\nNotes (last round):")
    for c in noted {
        if let failure = failures[c.key] {
            print("- \(c.key): FAILED: \(failure)")
        } else if let note = notes[c.key] {
            print("- \(c.key): \(note)")
        }
    }
}
exit(failures.isEmpty ? 0 : 1)
