// The results: per-round records, per-system summaries, the markdown tables
// (stdout and latest.md), JSON and CSV of every round, and the chart.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import FoundationEssentials

/// One system's measurement in one round (or its failure).
struct RoundResult: Codable {
    var workload: String
    var system: String
    var round: Int
    /// Bytes/s, reads/s or files/s; nil when the round failed.
    var rate: Double?
    /// The rate in the table's unit (GiB/s for bytes).
    var value: Double?
    var unit: String
    var peakRSSMiB: Double?
    var minorFaults: Double?
    var error: String?

    init(_ c: Case, round: Int, sample: Sample? = nil, error: String? = nil) {
        workload = c.workload.rawValue
        system = c.system
        self.round = round
        rate = sample?.rate
        value = sample.map { c.workload.unit.scaled($0.rate) }
        unit = c.workload.unit.rawValue
        peakRSSMiB = sample?.peakRSSMiB
        minorFaults = sample?.minorFaults
        self.error = error
    }
}

/// What a copy child costs before it copies.
struct Baseline: Codable {
    var label: String
    var peakRSSMiB: Double
    var minorFaults: Double
}

/// One system's rounds of one workload, summarized.
struct Summary: Codable {
    var workload: String
    var system: String
    var label: String
    var unit: String
    var check: String
    var rounds: Int
    var median: Double?
    var min: Double?
    var max: Double?
    /// The median over rounds of this system's time over RingIO's in the same round.
    var timeOverRingIO: Double?
    var ringIOReference: String?
    var peakRSSMiB: Double?
    var minorFaultsPerGiB: Double?
    var note: String?
    var failure: String?
}

struct Report {
    let machine: Machine
    let options: Options
    let cold: Bool
    let cases: [Case]
    let rounds: [RoundResult]
    let notes: [String: String]
    let failures: [String: String]
    let baselines: [Baseline]
    let remarks: [String]
    let log: AppendLog

    private var workloads: [Workload] { Workload.allCases.filter { w in cases.contains { $0.workload == w } } }

    /// The system whose time the others are divided by: the handler API where it ran, else the async API.
    private func reference(_ workload: Workload) -> String? {
        let systems = cases.filter { $0.workload == workload }.map(\.system)
        return ["ringio", "ringio-async"].first { systems.contains($0) }
    }

    private func rates(_ c: Case) -> [Int: Double] {
        Dictionary(uniqueKeysWithValues: rounds.filter { $0.workload == c.workload.rawValue && $0.system == c.system }
            .compactMap { r in r.rate.map { (r.round, $0) } })
    }

    var summaries: [Summary] {
        cases.map { c in
            let mine = rates(c)
            let values = mine.values.map { c.workload.unit.scaled($0) }
            var s = Summary(workload: c.workload.rawValue, system: c.system, label: c.label, unit: c.workload.unit.rawValue,
                            check: c.check.rawValue, rounds: mine.count, note: notes[c.key], failure: failures[c.key])
            if s.failure == nil, !values.isEmpty {
                s.median = median(values)
                s.min = values.min()
                s.max = values.max()
            }
            if let ref = reference(c.workload), let refCase = cases.first(where: { $0.workload == c.workload && $0.system == ref }),
               failures[refCase.key] == nil, s.failure == nil {
                let theirs = rates(refCase)
                let ratios = mine.compactMap { round, rate in theirs[round].map { $0 / rate } }
                if !ratios.isEmpty {
                    s.timeOverRingIO = median(ratios)
                    s.ringIOReference = ref
                }
            }
            let usage = rounds.filter { $0.workload == c.workload.rawValue && $0.system == c.system && $0.error == nil }
            if c.workload == .copy, s.failure == nil, !usage.isEmpty {
                s.peakRSSMiB = median(usage.compactMap(\.peakRSSMiB))
                s.minorFaultsPerGiB = median(usage.compactMap(\.minorFaults)) / (Double(options.size) / gib)
            }
            return s
        }
    }

    // MARK: markdown

    func markdown() -> String {
        let all = summaries
        var out = """
            ## RingIO throughput: \(sizeText(options.size)) file, \(options.rounds) round\(options.rounds == 1 ? "" : "s"), \(cold ? "cold" : "page-cached"), median (min – max)

            \(machine.summary). Load average \(machine.loadBefore) before, \(machine.loadAfter) after; \(machine.date); \
            \(machine.fio ?? "fio not installed").

            Ratio: the system's time over RingIO's in the same round, median of the rounds (above 1×: RingIO is faster; \
            RingIO = its handler API, or its async API where that is the only RingIO row). Every result is checked: \
            reads by a checksum of every 4 KiB block against the source's, copies byte for byte, the log record by \
            record (fio by its byte count); a wrong result fails the row.

            """
        for workload in workloads {
            let rows = all.filter { $0.workload == workload.rawValue }
            out += "\n### \(workload.title(size: options.size, reads: options.reads, files: options.files, log: log))\n\n"
            switch workload {
            case .copy:
                out += "RingIO's handler copy and DispatchIO keep at most \(copyWindowBytes >> 20) MiB of writes outstanding. "
                    + "Peak RSS: VmHWM of the child (cp, ringcp: wait4 after fork). Each timed copy follows an untimed one, "
                    + "deleted just before (pages freed earlier may be back with the VM's host).\n\n"
            case .random32, .random1:
                let slow = min(options.reads, 20_000)
                if slow < options.reads {
                    out += "DispatchIO and SwiftNIO make \(grouped(Double(slow))) of the reads (the same first offsets); fio its own \(grouped(Double(options.reads))) random offsets.\n\n"
                }
            case .files:
                out += "Each file is \(4) KiB; the destination directory is new each time, and the copies are removed only at the end of the run (creating files right after deleting thousands is slow on ext4).\n\n"
            case .readfile:
                out += "Each file is 12 KiB and page-cached; each system reads them all, one at a time, and checks every byte.\n\n"
            case .copyfile, .copyfile12:
                out += "Each copy goes to a new file of a new directory; cp is started once per file (its start-up counts).\n\n"
            case .append:
                out += "Each record: its index (8 bytes) and a fixed payload; the file is new each time; the time includes the final fsync.\n\n"
            case .read:
                break
            }
            var header = ["system", workload.unit.rawValue, "min – max", "÷ RingIO"]
            var lines = rows.map { s -> [String] in
                let format = { (v: Double) in workload.unit == .files || workload.unit == .reads ? grouped(v) : fixed(v, 2) }
                guard let m = s.median, let lo = s.min, let hi = s.max else {
                    return [s.label, "FAILED", "", ""] + (workload == .copy ? ["", ""] : [])
                }
                var line = [s.label, format(m), format(lo) + " – " + format(hi), s.timeOverRingIO.map { fixed($0, 2) + "×" } ?? "—"]
                if workload == .copy {
                    line += [s.peakRSSMiB.map { fixed($0, 1) } ?? "", s.minorFaultsPerGiB.map { grouped($0) } ?? ""]
                }
                return line
            }
            if workload == .copy {
                header += ["peak RSS MiB", "minor faults/GiB"]
                for b in baselines { lines.append([b.label, "", "", "", fixed(b.peakRSSMiB, 1), grouped(b.minorFaults) + " in all"]) }
            }
            out += table(header, lines)
        }
        let goals = self.goals(all)
        if !goals.isEmpty { out += "\nGoals:\n" + goals.map { "- \($0)\n" }.joined() }
        let failed = all.filter { $0.failure != nil }
        let noted = all.filter { $0.note != nil && $0.failure == nil }
        if !failed.isEmpty || !noted.isEmpty {
            out += "\nNotes (last round):\n"
            for s in failed { out += "- \(s.workload)/\(s.system): FAILED: \(s.failure!)\n" }
            for s in noted { out += "- \(s.workload)/\(s.system): \(s.note!)\n" }
        }
        if !remarks.isEmpty { out += "\n" + remarks.map { "- \($0)\n" }.joined() }
        return out
    }

    private func table(_ header: [String], _ rows: [[String]]) -> String {
        let widths = header.indices.map { i in ([header[i]] + rows.map { $0[i] }).map(\.count).max()! }
        func line(_ cells: [String]) -> String {
            "| " + cells.enumerated().map { i, cell in i == 0 ? pad(cell, widths[i]) : lpad(cell, widths[i]) }.joined(separator: " | ") + " |\n"
        }
        let rule = "|" + widths.enumerated().map { i, w in
            i == 0 ? String(repeating: "-", count: w + 2) : String(repeating: "-", count: w + 1) + ":"
        }.joined(separator: "|") + "|\n"
        return line(header) + rule + rows.map(line).joined()
    }

    /// The card's goals, each with what this run measured.
    private func goals(_ all: [Summary]) -> [String] {
        func find(_ workload: Workload, _ system: String) -> Summary? {
            all.first { $0.workload == workload.rawValue && $0.system == system && $0.failure == nil && $0.median != nil }
        }
        func goal(_ text: String, _ value: Double?, _ shown: (Double) -> String, met: (Double) -> Bool) -> String? {
            value.map { "\(text): \(shown($0)) — " + (met($0) ? "met" : "**not met**") }
        }
        let times = { (v: Double) in fixed(v, 2) + "×" }
        return [
            goal("sequential read: RingIO ≥ 0.8 × fio's rate", find(.read, "fio")?.timeOverRingIO, times, met: { $0 >= 0.8 }),
            goal("copy: RingIO's time ≤ 1.1 × the read/write loop's", find(.copy, "plain")?.timeOverRingIO.map { 1 / $0 }, times,
                 met: { $0 <= 1.1 }),
            goal("copy: RingIO ≥ 3 × as fast as DispatchIO", find(.copy, "dispatchio")?.timeOverRingIO, times, met: { $0 >= 3 }),
            goal("copy: RingIO's peak RSS ≤ 64 MiB", find(.copy, "ringio")?.peakRSSMiB, { fixed($0, 1) + " MiB" }, met: { $0 <= 64 }),
            goal("copy: RingIO ≤ 5,000 minor faults/GiB", find(.copy, "ringio")?.minorFaultsPerGiB, { grouped($0) }, met: { $0 <= 5000 }),
            goal("random 4 KiB reads, 32 in flight: RingIO ≥ fio's rate", find(.random32, "fio")?.timeOverRingIO, times,
                 met: { $0 >= 1 }),
        ].compactMap { $0 }
    }

    // MARK: files

    private struct Document: Codable {
        var machine: Machine
        var configuration: Configuration
        var results: [Summary]
        var rounds: [RoundResult]
        var copyBaselines: [Baseline]
        var remarks: [String]
    }

    private struct Configuration: Codable {
        var sizeBytes: Int
        var rounds: Int
        var randomReads: Int
        var randomReadsSlowSystems: Int
        var smallFiles: Int
        var smallFileBytes: Int
        var appendLogBytes: Int
        var appendRecordBytes: Int
        var cold: Bool
        var ringcp: String?
        var only: [String]
    }

    func json() throws -> String {
        let document = Document(
            machine: machine,
            configuration: Configuration(sizeBytes: options.size, rounds: options.rounds, randomReads: options.reads,
                                         randomReadsSlowSystems: min(options.reads, 20_000), smallFiles: options.files,
                                         smallFileBytes: 4096, appendLogBytes: log.totalBytes, appendRecordBytes: log.recordSize,
                                         cold: cold, ringcp: options.ringcp, only: options.only),
            results: summaries, rounds: rounds, copyBaselines: baselines, remarks: remarks)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return String(decoding: try encoder.encode(document), as: UTF8.self) + "\n"
    }

    func csv() -> String {
        func field(_ s: String) -> String {
            s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" }) ? "\"" + s.replacingAll("\"", "\"\"") + "\"" : s
        }
        func number(_ v: Double?) -> String { v.map { "\($0)" } ?? "" }
        let labels = Dictionary(uniqueKeysWithValues: cases.map { ($0.key, $0.label) })
        var out = "workload,system,label,round,rate,value,unit,peak_rss_mib,minor_faults,error\n"
        for r in rounds {
            out += [r.workload, r.system, labels["\(r.workload)/\(r.system)"] ?? "", "\(r.round)", number(r.rate), number(r.value),
                    r.unit, number(r.peakRSSMiB), number(r.minorFaults), r.error ?? ""].map(field).joined(separator: ",") + "\n"
        }
        return out
    }

    /// Writes throughput.{md,json,csv,svg} into `<directory>/<UTC time>/` and
    /// copies them to `<directory>/latest.*`; returns the paths written.
    func write(to directory: String) throws -> [String] {
        let run = "\(directory)/\(utcTimestamp(compact: true))"
        try makeDirectories(run)
        let contents = [
            ("md", markdown()),
            ("json", try json()),
            ("csv", csv()),
            ("svg", Chart(summaries: summaries, workloads: workloads, options: options, log: log, machine: machine).svg()),
        ]
        var written: [String] = []
        for (ext, text) in contents {
            for path in ["\(run)/throughput.\(ext)", "\(directory)/latest.\(ext)"] {
                try writeText(text, to: path)
                written.append(path)
            }
        }
        return written
    }
}

/// Benchmarks/results, beside this package's sources.
func defaultOutputDirectory() -> String {
    let parts = "\(#filePath)".split(separator: "/", omittingEmptySubsequences: false)
    return parts.dropLast(4).joined(separator: "/") + "/Benchmarks/results"
}

func makeDirectories(_ path: String) throws {
    var prefix = path.hasPrefix("/") ? "" : "."
    for part in path.split(separator: "/") {
        prefix += "/" + part
        if mkdir(prefix, 0o755) != 0 && errno != EEXIST { throw BenchError("mkdir \(prefix): errno \(errno)") }
    }
}

func writeText(_ text: String, to path: String) throws {
    let fd = try openFile(path, O_WRONLY | O_CREAT | O_TRUNC)
    defer { close(fd) }
    var bytes = Array(text.utf8)
    try bytes.withUnsafeMutableBytes { try PlainCases.writeAll(fd, UnsafeRawBufferPointer($0)) }
}

extension String {
    func replacingAll(_ target: String, _ replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
