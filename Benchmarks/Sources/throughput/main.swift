// throughput: RingIO beside the systems a user would otherwise pick, on the
// same files in the same run (scripts/bench runs it; `--help` lists the options).
//
// Workloads (Workload.swift), each run by every system that can (Cases.swift):
//   read      sequential read of a page-cached file to EOF (GiB/s)
//   copy      copy of that file, each in a child process that reports its
//             peak RSS and minor faults (GiB/s)
//   random32  random 4 KiB reads of the cached file, 32 in flight (reads/s)
//   random1   the same, 1 in flight (reads/s)
//   files     2,000 files of 4 KiB copied into a new directory (files/s)
//   readfile  2,000 files of 12 KiB read whole, one after another (files/s)
//   copyfile, copyfile12  the 4 KiB (12 KiB) files copied one at a time,
//             each to a new file (files/s; cp is started per file)
//   append    an append log of 64 KiB records, 256 MiB, then fsync (GiB/s)
// Systems: RingIO's handler API and async API, DispatchIO, SwiftNIO's
// FileSystem and NonBlockingFileIO, a plain system-call loop, cp (and
// `--ringcp PATH`) for copies, fio's io_uring engine as a ceiling.
//
// Every result is checked (Checksum.swift, Inputs.swift): a wrong answer
// fails the system's row. Systems alternate within each round, the order
// rotating from round to round; the tables give the median of the rounds,
// min – max, and each system's time over RingIO's in the same round. The
// tables go to stdout; JSON and CSV of every round, the markdown tables and
// an SVG chart go to `--out` (Benchmarks/results by default: a directory per
// run and latest.*).
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport

// `throughput queues ...`: asyncAfter, concurrentPerform, semaphores beside Dispatch (QueueCases.swift).
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "queues" {
    QueueBench.main(Array(CommandLine.arguments.dropFirst(2)))
}

// `throughput direct ...`: cold-cache, range-read and registered-resource cases (DirectCases.swift).
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "direct" {
    DirectBench.main(Array(CommandLine.arguments.dropFirst(2)))
}

// `throughput natural ...`: the first code a user writes, beside its peers (NaturalCases.swift).
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "natural" {
    NaturalBench.main(Array(CommandLine.arguments.dropFirst(2)))
}

// `throughput sources ...`: dispatch sources beside Dispatch's (SourceCases.swift).
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "sources" {
    SourceBench.main(Array(CommandLine.arguments.dropFirst(2)))
}

// `throughput files ...`: listing, info, lines and tree removal (FilesBench.swift).
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "files" {
    FilesBench.main(Array(CommandLine.arguments.dropFirst(2)))
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
            case "nio-nbfio": try NonBlockingFileIOCases.copy(source, destination, timeout: timeout)
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

// MARK: - setup

let options: Options
switch Options.parse(Array(CommandLine.arguments.dropFirst())) {
case .success(let parsed): options = parsed
case .failure(let exit):
    print(exit.message)
    Glibc.exit(exit.status)
}

var coldNote: String? = nil
var cold = options.cold
if cold, let failure = PageCache.drop() {
    coldNote = "--cold asked for, but the page cache cannot be dropped here (\(failure)): this run is warm."
    cold = false
    progress("throughput: \(coldNote!)")
}

let workspace: Workspace
do {
    workspace = try Workspace(parent: options.directory, size: options.size)
} catch {
    print("throughput: \(error)")
    exit(1)
}
let fio = Fio.locate()
let loadBefore = loadAverage()
progress("throughput: generating \(sizeText(options.size)) and \(options.files) small files in \(workspace.dir)")
let sums: SourceSums
let readFileSums: UInt64
do {
    sums = try generate(workspace.source, size: options.size)
    try generateSmallFiles(workspace.smallFiles, count: options.files, size: 4096)
    readFileSums = try ReadFileCases.generate(workspace.readFiles, count: options.files)
    try readThrough(workspace.source)
} catch {
    print("throughput: \(error)")
    workspace.remove()
    exit(1)
}

let bench = Bench(options: options, workspace: workspace, sums: sums, readFileSums: readFileSums, fio: fio, cold: cold)
var cases = bench.cases()
if !options.only.isEmpty {
    // A word ending in "=" names one case exactly ("random1/ringio=").
    cases = cases.filter { c in
        options.only.contains { $0.hasSuffix("=") ? c.key == String($0.dropLast()) : c.key.contains($0) }
    }
    guard !cases.isEmpty else {
        print("throughput: --only \(options.only.joined(separator: ",")) matches no case\n" + Options.usage)
        workspace.remove()
        exit(2)
    }
}

let engine = RingIOCases.engineDescription
/// What a copy child costs before it copies anything: this binary doing
/// nothing, and `true` started the way cp is.
var baselines: [Baseline] = []
if cases.contains(where: { $0.workload == .copy }) {
    for (label, argv) in [("(this binary, doing nothing)", [selfPath, "child", "baseline"]),
                          ("(true, started like cp)", [selfPath, "child", "exec", which("true") ?? "/bin/true"])] {
        if let child = try? spawn(argv, timeout: 30), child.exitedCleanly {
            let values = keyValues(child.output)
            baselines.append(Baseline(label: label, peakRSSMiB: (values["peak_kib"] ?? 0) / 1024,
                                      minorFaults: values["minflt"] ?? Double(child.minorFaults)))
        }
    }
}

// MARK: - run

var rounds: [RoundResult] = []
var notes: [String: String] = [:]
var failures: [String: String] = [:]
let busy = options.busy > 0 ? BusyThreads(count: options.busy) : nil
for round in 1...options.rounds {
    for workload in Workload.allCases {
        let inWorkload = cases.filter { $0.workload == workload }
        guard !inWorkload.isEmpty else { continue }
        let shift = (round - 1) % inWorkload.count
        for c in inWorkload[shift...] + inWorkload[..<shift] where failures[c.key] == nil {
            do {
                if [.read, .random32, .random1].contains(workload) { try bench.prepareSource() }
                let sample = try c.measure()
                rounds.append(RoundResult(c, round: round, sample: sample))
                if let note = sample.note { notes[c.key] = note }
                progress("round \(round)/\(options.rounds) \(c.key): \(workload.unit.format(sample.rate)) \(workload.unit.rawValue)")
            } catch {
                failures[c.key] = "\(error)"
                rounds.append(RoundResult(c, round: round, error: "\(error)"))
                progress("round \(round)/\(options.rounds) \(c.key): FAILED: \(error)")
            }
        }
    }
}
busy?.finish()
workspace.remove()

// MARK: - report

var machine = Machine(workspace: workspace, engine: engine, fio: fio?.version, loadBefore: loadBefore)
machine.loadAfter = loadAverage()
var remarks: [String] = []
if let coldNote { remarks.append(coldNote) }
if options.busy > 0 {
    remarks.append("Busy: \(options.busy) threads of this process spun on the CPU beside every measurement (fio's and the children's included).")
}
if cold { remarks.append("Cold: the page cache was dropped before each measurement of read, copy, random and files.") }
if bench.evictions > 0 {
    remarks.append("The source was partly evicted from the page cache before \(bench.evictions) of \(bench.measurements) measurements and read back in first (untimed).")
}
if fio == nil { remarks.append("fio is not installed: its rows are skipped.") }
let report = Report(machine: machine, options: options, cold: cold, cases: cases, rounds: rounds, notes: notes,
                    failures: failures, baselines: baselines, remarks: remarks, log: bench.log)
print(report.markdown())
do {
    let written = try report.write(to: options.output ?? defaultOutputDirectory())
    progress("throughput: wrote \(written.joined(separator: ", "))")
} catch {
    progress("throughput: could not write the results: \(error)")
    exit(1)
}
exit(failures.isEmpty ? 0 : 1)
