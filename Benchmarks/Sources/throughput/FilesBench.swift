// throughput files: listing, info, lines and tree removal, RingIO beside the
// peers in the same run (Benchmarks/results/files.md has the figures).
//
//   swift run -c release --package-path Benchmarks throughput files \
//       [--rounds 5] [--busy 2] [--dir DIR] [--lines-mib 200] [--only list,info,lines,read,remove]
//       [--systems getline,RingIO]   (only the systems whose names contain one of these)
//
// 1. list:   100,000 files in 100 directories, walked recursively and the
//            regular files counted: RingIO (entries, and batches), FileManager's
//            enumerator, NIO's listContents(recursive: true) batched,
//            `find DIR -type f | wc -l` (started per run, as a user would).
// 2. info:   10,000 of those files, one after another: RingIO IO.info (a pool
//            hop each), IO.info through the ring (IORING_OP_STATX), 16 at a
//            time, FileManager.attributesOfItem, NIO info(forFileAt:), and a
//            plain statx loop as the floor.
// 3. lines:  a 200 MiB text file of lines of 0–120 bytes: RingIO IO.lines,
//            a getline(3) loop, FileHandle.readToEnd + split, String(contentsOfFile:)
//            + split; each counts the lines and their bytes.
// 4. read:   a tree of 10,000 files of 4 KiB in 100 directories, listed
//            recursively and every file read whole into a checksum: RingIO
//            directoryEntries + IO.readFile (one after another, and 16 at a
//            time), FileManager's enumerator + Data(contentsOf:), NIO
//            listContents + readToEnd (one after another, and 16 at a time).
// 5. remove: a tree of 10,000 files in 100 directories (made anew before each
//            run, untimed): RingIO removeItem(recursively:), FileManager.removeItem,
//            NIO removeItem, `rm -rf`.
//
// Systems alternate within a round, the order rotating from round to round;
// the table gives each system's median time, its rate, and the median over
// the rounds of its time over RingIO's first row's time in the same round
// (above 1: RingIO is faster).
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
@_spi(Engine) import RingIO
import SystemPackage

enum FilesBench {
    struct Options {
        var rounds = 5
        var busy = 0
        var directory: String?
        var linesMiB = 200
        var only: [String] = []
        /// A ringcp binary for the copy section's `ringcp -r` rows.
        var ringcp: String?
        /// Only the systems whose names contain one of these (all when empty).
        var systems: [String] = []
    }

    /// One system of a section: an untimed setup, then the timed run, whose
    /// result must equal the section's expected value.
    struct System {
        let name: String
        var setup: () throws -> Void = {}
        let run: () throws -> Int
    }

    static func main(_ arguments: [String]) -> Never {
        var o = Options()
        var it = arguments.makeIterator()
        while let option = it.next() {
            switch option {
            case "--rounds": o.rounds = Int(it.next() ?? "") ?? 0
            case "--busy": o.busy = Int(it.next() ?? "") ?? -1
            case "--dir": o.directory = it.next()
            case "--lines-mib": o.linesMiB = Int(it.next() ?? "") ?? 0
            case "--only": o.only += (it.next() ?? "").split(separator: ",").map(String.init)
            case "--ringcp": o.ringcp = it.next()
            case "--systems": o.systems += (it.next() ?? "").split(separator: ",").map(String.init)
            default:
                print("usage: throughput files [--rounds N] [--busy N] [--dir DIR] [--lines-mib N] [--ringcp PATH] [--only list,info,lines,read,remove,copy] [--systems NAME,...]")
                exit(option == "--help" ? 0 : 2)
            }
        }
        guard o.rounds > 0, o.busy >= 0, o.linesMiB > 0 else {
            print("throughput files: counts must be positive")
            exit(2)
        }
        do {
            try run(o)
            exit(0)
        } catch {
            print("throughput files: \(error)")
            exit(1)
        }
    }

    static func wants(_ o: Options, _ section: String) -> Bool { o.only.isEmpty || o.only.contains(section) }

    static func chosen(_ systems: [System], _ o: Options) -> [System] {
        o.systems.isEmpty ? systems : systems.filter { s in o.systems.contains { s.name.contains($0) } }
    }

    static func run(_ o: Options) throws {
        let parent = o.directory ?? "/tmp"
        let root = parent + "/ringio-files-bench-\(getpid())"
        try make(root)
        defer { _ = try? spawn(["/bin/rm", "-rf", root], timeout: 600) }
        let busy = o.busy > 0 ? BusyThreads(count: o.busy) : nil
        defer { busy?.finish() }
        print("# throughput files: \(o.rounds) rounds, \(o.busy) busy threads, \(cpuCount()) CPUs, in \(parent)\n")

        let tree = root + "/tree"
        if wants(o, "list") || wants(o, "info") {
            try make(tree)
            for d in 0..<100 {
                try make(tree + "/d\(d)")
                for f in 0..<1000 { try touch(tree + "/d\(d)/file-\(f).txt") }
            }
        }
        if wants(o, "list") {
            let systems = [
                System(name: "RingIO directoryEntries") { try countRingIO(tree) },
                System(name: "RingIO directoryEntries batched") { try countRingIOBatched(tree) },
                System(name: "FileManager enumerator") { FoundationFiles.countEnumerator(tree) },
                System(name: "NIO listContents batched") { try NIOFiles.countList(tree) },
                System(name: "find -type f | wc -l") { try countFind(tree) },
            ]
            report("List 100,000 files in 100 directories (recursive)", unit: "entries/s", work: 100_000,
                   measure(chosen(systems, o), expected: 100_000, rounds: o.rounds))
        }
        if wants(o, "info") {
            let paths = (0..<10).flatMap { d in (0..<1000).map { tree + "/d\(d)/file-\($0).txt" } }
            let systems = [
                System(name: "RingIO IO.info") { try infoRingIO(paths) },
                System(name: "RingIO IO.info, 16 at a time") { try infoRingIOConcurrent(paths) },
                System(name: "RingIO IO.info through the ring") { try infoRingIORing(paths) },
                System(name: "FileManager attributesOfItem") { FoundationFiles.attributes(paths) },
                System(name: "NIO info(forFileAt:)") { try NIOFiles.info(paths) },
                System(name: "statx loop (floor)") { statxLoop(paths) },
            ]
            report("Info of 10,000 files, one after another", unit: "files/s", work: 10_000,
                   measure(chosen(systems, o), expected: 10_000, rounds: o.rounds))
        }
        if wants(o, "lines") {
            let text = root + "/text"
            let (lines, bytes) = try writeText(text, mib: o.linesMiB)
            let expected = lines &* 31 &+ bytes
            let systems = [
                System(name: "RingIO IO.lines") { try linesRingIO(text) },
                System(name: "getline loop") { try linesGetline(text) },
                System(name: "FileHandle.readToEnd + split") { try FoundationFiles.linesFileHandle(text) },
                System(name: "String(contentsOfFile:) + split") { try FoundationFiles.linesString(text) },
            ]
            report("Lines of a \(o.linesMiB) MiB text file (\(lines) lines)", unit: "MiB/s", work: Double(o.linesMiB),
                   measure(chosen(systems, o), expected: expected, rounds: o.rounds))
        }
        if wants(o, "read") {
            let files = root + "/files"
            let expected = try makeReadTree(files)
            let systems = [
                System(name: "RingIO directoryEntries + IO.readFile") { try readTreeRingIO(files) },
                System(name: "RingIO, 16 files at a time") { try readTreeRingIOConcurrent(files) },
                System(name: "FileManager enumerator + Data(contentsOf:)") { try FoundationFiles.readTree(files) },
                System(name: "NIO listContents + readToEnd") { try NIOFiles.readTree(files, width: 1) },
                System(name: "NIO, 16 files at a time") { try NIOFiles.readTree(files, width: 16) },
            ]
            report("Read every file of a tree of 10,000 files of 4 KiB (list + read + checksum)", unit: "files/s",
                   work: 10_000, measure(chosen(systems, o), expected: expected, rounds: o.rounds))
        }
        if wants(o, "copy") {
            // 10,000 files of 4 KiB in 100 directories, copied to a new tree (removed, untimed, before each run).
            let source = root + "/copy-source"
            let copy = root + "/copy-target"
            try makeCopySource(source, directories: 100, files: 100)
            let setup = { if exists(copy) { _ = try spawn(["/bin/rm", "-rf", copy], timeout: 600) } }
            var systems = [
                System(name: "RingIO IO.copyItem", setup: setup) { try copyRingIO(source, copy) },
                System(name: "NIO copyItem", setup: setup) { try NIOFiles.copy(source, copy) },
                System(name: "cp -r", setup: setup) { try copyCommand(["/bin/cp", "-r", source, copy], copy) },
            ]
            if let ringcp = o.ringcp {
                systems.append(System(name: "ringcp -r", setup: setup) { try copyCommand([ringcp, "-r", source, copy], copy) })
            }
            let rows = measure(systems, expected: 10_000, rounds: o.rounds)
            try verifyCopy(copy, expected: 10_000)
            report("Copy a tree of 10,000 files of 4 KiB in 100 directories", unit: "files/s", work: 10_000, rows)
            // ringcp's own case: 2,000 files of 4 KiB in one directory.
            let flat = root + "/copy-flat"
            try makeCopySource(flat, directories: 1, files: 2000)
            var flatSystems = [
                System(name: "RingIO IO.copyItem", setup: setup) { try copyRingIO(flat, copy, expected: 2000) },
                System(name: "cp -r", setup: setup) { try copyCommand(["/bin/cp", "-r", flat, copy], copy, expected: 2000) },
            ]
            if let ringcp = o.ringcp {
                flatSystems.insert(System(name: "ringcp -r", setup: setup) {
                    try copyCommand([ringcp, "-r", flat, copy], copy, expected: 2000)
                }, at: 1)
            }
            let flatRows = measure(flatSystems, expected: 2_000, rounds: o.rounds)
            try verifyCopy(copy, expected: 2_000)
            report("Copy 2,000 files of 4 KiB in one directory", unit: "files/s", work: 2_000, flatRows)
        }
        if wants(o, "remove") {
            let doomed = root + "/doomed"
            let setup = { try makeDoomed(doomed) }
            let systems = [
                System(name: "RingIO removeItem(recursively:)", setup: setup) { try removeRingIO(doomed) },
                System(name: "FileManager removeItem", setup: setup) { try FoundationFiles.remove(doomed) },
                System(name: "NIO removeItem", setup: setup) { try NIOFiles.remove(doomed) },
                System(name: "rm -rf", setup: setup) { try removeRm(doomed) },
            ]
            report("Remove a tree of 10,000 files in 100 directories", unit: "files/s", work: 10_000,
                   measure(chosen(systems, o), expected: 1, rounds: o.rounds))
        }
    }

    // MARK: - the harness

    struct Row {
        let name: String
        var seconds: [Double] = []
        var ratios: [Double] = []
        var failure: String?
    }

    /// Every system once a round, in a rotating order.
    static func measure(_ systems: [System], expected: Int, rounds: Int) -> [Row] {
        var rows = systems.map { Row(name: $0.name) }
        for round in 0..<rounds {
            var times = [Double?](repeating: nil, count: systems.count)
            for k in 0..<systems.count {
                let i = (k + round) % systems.count
                guard rows[i].failure == nil else { continue }
                do {
                    try systems[i].setup()
                    let start = now()
                    let result = try systems[i].run()
                    let elapsed = seconds(since: start)
                    guard result == expected else { throw BenchError("got \(result), expected \(expected)") }
                    times[i] = elapsed
                    rows[i].seconds.append(elapsed)
                } catch {
                    rows[i].failure = "\(error)"
                    progress("throughput files: \(systems[i].name): \(error)")
                }
            }
            if let base = times[0] {
                for i in rows.indices { if let t = times[i] { rows[i].ratios.append(t / base) } }
            }
        }
        return rows
    }

    static func report(_ title: String, unit: String, work: Double, _ rows: [Row]) {
        print("## \(title)\n")
        print("| system | median | \(unit) | min – max | time / RingIO's |")
        print("|---|---:|---:|---:|---:|")
        for row in rows {
            if let failure = row.failure, row.seconds.isEmpty {
                print("| \(row.name) | failed: \(failure) | | | |")
                continue
            }
            let m = median(row.seconds)
            let range = "\(milliseconds(row.seconds.min()!)) – \(milliseconds(row.seconds.max()!))"
            print("| \(row.name) | \(milliseconds(m)) | \(rate(work / m)) | \(range) | \(fixed(median(row.ratios), 2))× |")
        }
        print("")
    }

    static func milliseconds(_ s: Double) -> String { fixed(s * 1000, s < 0.1 ? 2 : 1) + " ms" }

    static func rate(_ r: Double) -> String {
        r >= 1e6 ? fixed(r / 1e6, 2) + " M" : r >= 1e3 ? fixed(r / 1e3, 1) + " k" : fixed(r, 1)
    }

    static func cpuCount() -> Int { Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))) }
}
