// The runner's command line.
#if canImport(Glibc)
import Glibc
#endif

struct Options {
    var size = 1 << 30
    var directory: String? = nil
    var rounds = 5
    var reads = 200_000
    var files = 2_000
    var logBytes = 256 << 20
    var logRecord = 64 << 10
    var only: [String] = []
    var cold = false
    /// readfile: drop each file's pages (`POSIX_FADV_DONTNEED`) before each
    /// measurement, keeping the paths cached.
    var evictPages = false
    var ringcp: String? = nil
    var output: String? = nil
    /// Threads spinning on the CPU beside every measurement.
    var busy = 0

    static let usage = """
        usage: throughput [--size BYTES[K|M|G] (1G)] [--size-mib N] [--rounds N (5)] [--reads N (200000)]
                          [--files N (2000)] [--log-size BYTES[K|M|G] (256M)]
                          [--log-record BYTES[K|M] (64K)] [--only WORD[,WORD...]]
                          [--cold] [--evict-pages] [--busy N] [--ringcp PATH] [--dir DIR ($TMPDIR or /tmp)] [--out DIR (Benchmarks/results)]
          --only keeps the cases whose "workload/system" contains a word (or, for a word ending in "=",
                 is it: random1/ringio= is that row alone): workloads read, copy, random32,
                 random1, files, readfile, copyfile, copyfile12, append; systems ringio, ringio-async, ringio-ring, ringio-async-ring, dispatchio, nio, nio-nbfio, plain, foundation,
                 cp, ringcp, fio
          --log-record sets the append log's record size: --log-record 4K --log-size 4G queues
                 1,000,000 records of 4 KiB at once
          --cold drops the page cache (sync; echo 3 > /proc/sys/vm/drop_caches) before each measurement
          --evict-pages drops the readfile workload's file pages (POSIX_FADV_DONTNEED) before each
                 measurement, the paths staying cached (no root needed)
          --busy N runs N threads spinning on the CPU (in this process) beside every measurement, fio's
                 and the children's included: a loaded machine
          --ringcp runs PATH -r SRC DST (files) and PATH SRC DST (copy) as the system "ringcp"
        """

    /// The options, or a message for the user and the exit status.
    static func parse(_ arguments: [String]) -> Result<Options, Exit> {
        var o = Options()
        var rest = arguments.makeIterator()
        func value(_ option: String) -> Result<String, Exit> {
            guard let v = rest.next() else { return .failure(Exit("throughput: \(option) needs a value", 2)) }
            return .success(v)
        }
        while let option = rest.next() {
            do {
                switch option {
                case "--size": o.size = try bytes(value(option).get(), option)
                case "--size-mib": o.size = try positive(value(option).get(), option) << 20
                case "--log-size": o.logBytes = try bytes(value(option).get(), option)
                case "--log-record": o.logRecord = try bytes(value(option).get(), option)
                case "--dir": o.directory = try value(option).get()
                case "--out": o.output = try value(option).get()
                case "--rounds": o.rounds = try positive(value(option).get(), option)
                case "--reads": o.reads = try positive(value(option).get(), option)
                case "--files": o.files = try positive(value(option).get(), option)
                case "--only": o.only += try value(option).get().lowercased().split(separator: ",").map(String.init)
                case "--cold": o.cold = true
                case "--evict-pages": o.evictPages = true
                case "--busy": o.busy = try positive(value(option).get(), option)
                case "--ringcp":
                    let path = try value(option).get()
                    guard access(path, X_OK) == 0 else { throw Exit("throughput: --ringcp \(path) is not an executable file", 2) }
                    o.ringcp = path
                case "--help", "-h": throw Exit(usage, 0)
                default: throw Exit("throughput: unknown option \(option)\n" + usage, 2)
                }
            } catch let exit as Exit {
                return .failure(exit)
            } catch {
                return .failure(Exit("throughput: \(error)", 2))
            }
        }
        guard o.size >= 1 << 20, o.size % 4096 == 0 else {
            return .failure(Exit("throughput: --size must be at least 1 MiB and a multiple of 4 KiB", 2))
        }
        guard o.logRecord >= 16, o.logRecord <= 64 << 20 else {
            return .failure(Exit("throughput: --log-record must be between 16 bytes and 64 MiB", 2))
        }
        guard o.logBytes >= o.logRecord else {
            return .failure(Exit("throughput: --log-size must be at least one record (--log-record)", 2))
        }
        return .success(o)
    }

    /// "1G", "512M", "64K", "1GiB", "4096".
    private static func bytes(_ text: String, _ option: String) throws -> Int {
        let lower = text.lowercased()
        let digits = lower.prefix { $0.isNumber }
        let unit = lower.dropFirst(digits.count)
        let shift: Int
        switch unit {
        case "": shift = 0
        case "k", "kib", "kb": shift = 10
        case "m", "mib", "mb": shift = 20
        case "g", "gib", "gb": shift = 30
        default: throw Exit("throughput: \(option) \(text): give bytes, or a number with K, M or G", 2)
        }
        guard let n = Int(digits), n > 0, n < 1 << (62 - shift) else { throw Exit("throughput: \(option) \(text): not a size", 2) }
        return n << shift
    }

    private static func positive(_ text: String, _ option: String) throws -> Int {
        guard let n = Int(text), n > 0 else { throw Exit("throughput: \(option) takes a positive number, not \(text)", 2) }
        return n
    }
}

/// A message to print and the status to exit with.
struct Exit: Error {
    let message: String
    let status: Int32
    init(_ message: String, _ status: Int32) {
        self.message = message
        self.status = status
    }
}
