// What the runner measures: the workloads, the systems that run each one
// (a case), and what one measurement yields.
import BenchSupport

/// One workload: the same work given to every system.
enum Workload: String, CaseIterable, Sendable {
    case read, copy, random32, random1, files, readfile, copyfile, copyfile12, append

    enum Unit: String, Sendable {
        case bytes = "GiB/s", reads = "reads/s", files = "files/s"

        /// A rate in this unit, as the tables show it.
        func format(_ rate: Double) -> String {
            switch self {
            case .bytes: fixed(rate / gib, 2)
            case .reads, .files: grouped(rate)
            }
        }

        /// A rate in the unit the tables and the JSON give (GiB/s for bytes).
        func scaled(_ rate: Double) -> Double { self == .bytes ? rate / gib : rate }
    }

    var unit: Unit {
        switch self {
        case .read, .copy, .append: .bytes
        case .random32, .random1: .reads
        case .files, .readfile, .copyfile, .copyfile12: .files
        }
    }

    /// The heading of the workload's table (and of its chart panel: `shortTitle`).
    func title(size: Int, reads: Int, files: Int, log: AppendLog) -> String {
        switch self {
        case .read: "Sequential read of a \(sizeText(size)) page-cached file to EOF"
        case .copy: "Copy of the \(sizeText(size)) file, each in a child process"
        case .random32: "\(grouped(Double(reads))) random 4 KiB reads of the cached file, 32 in flight"
        case .random1: "\(grouped(Double(reads))) random 4 KiB reads of the cached file, 1 in flight"
        case .files: "\(grouped(Double(files))) files of 4 KiB copied into a new directory"
        case .readfile: "\(grouped(Double(files))) files of 12 KiB read whole, one after another"
        case .copyfile: "\(grouped(Double(files))) files of 4 KiB copied one at a time (µs per copy: 1,000,000 ÷ files/s)"
        case .copyfile12: "\(grouped(Double(files))) files of 12 KiB copied one at a time (µs per copy: 1,000,000 ÷ files/s)"
        case .append: "Append log: \(grouped(Double(log.records))) records of \(log.recordSize >> 10) KiB (\(sizeText(log.totalBytes))), then fsync"
        }
    }

    var shortTitle: String {
        switch self {
        case .read: "Sequential read (GiB/s)"
        case .copy: "File copy (GiB/s)"
        case .random32: "Random 4 KiB reads, 32 in flight (reads/s)"
        case .random1: "Random 4 KiB reads, 1 in flight (reads/s)"
        case .files: "Small files copied (files/s)"
        case .readfile: "Small files read whole (files/s)"
        case .copyfile: "4 KiB files copied one at a time (files/s)"
        case .copyfile12: "12 KiB files copied one at a time (files/s)"
        case .append: "Append log + fsync (GiB/s)"
        }
    }
}

/// "1 GiB", "256 MiB".
func sizeText(_ bytes: Int) -> String {
    bytes >= 1 << 30 && bytes % (1 << 30) == 0 ? "\(bytes >> 30) GiB" : "\(bytes >> 20) MiB"
}

/// One measurement: a rate (bytes/s, reads/s or files/s) and what the run noticed.
struct Sample {
    var rate: Double
    var note: String? = nil
    /// A copy child's peak resident set and minor page faults.
    var peakRSSMiB: Double? = nil
    var minorFaults: Double? = nil
}

/// One system running one workload.
struct Case {
    let workload: Workload
    /// "ringio", "ringio-async", "dispatchio", "nio", "nio-nbfio", "plain", "cp", "ringcp", "fio".
    let system: String
    let label: String
    /// How each result is checked.
    let check: Check
    let measure: @MainActor () throws -> Sample

    var key: String { "\(workload.rawValue)/\(system)" }
    var isRingIO: Bool { system.hasPrefix("ringio") }

    enum Check: String {
        case checksum = "checksum of every block read"
        case identical = "copy compared byte for byte"
        case log = "log read back record by record"
        case count = "byte count only (fio does not hand over the data)"
    }
}
