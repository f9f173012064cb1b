// The one-file copy workloads: `options.files` files of 4 KiB (`copyfile`)
// or 12 KiB (`copyfile12`), each copied to a new file of a new directory,
// one after another (no copy overlaps the next): `IO.copyFile` from a plain
// task and from a task on the engine's ring queue, `cp SRC DST` started for
// each file (its process start-up included: what a script pays), and an
// open/read/write/close loop. The tables give files/s; 1,000,000 / rate is
// the µs per copy. Every copy is compared byte for byte with its source.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import RingIO
import SystemPackage

enum CopyFileCases {
    /// `IO.copyFile` of each file in turn, from a plain task, or (`onRing`)
    /// from a task whose executor preference is the engine's ring queue.
    static func ringio(_ source: String, _ destination: String, count: Int, onRing: Bool,
                       timeout: Double) throws -> Double {
        try blocking("RingIO IO.copyFile × \(count), one at a time", timeout: timeout) {
            let body: @Sendable () async throws -> Double = {
                let start = now()
                for i in 0..<count {
                    try await IO.copyFile(from: FilePath(smallFilePath(source, i)),
                                          to: FilePath(smallFilePath(destination, i)))
                }
                return seconds(since: start)
            }
            if onRing { return try await withTaskExecutorPreference(IOEngine.shared.queue) { try await body() } }
            return try await body()
        }
    }

    /// `cp SRC DST` for each file in turn.
    static func cp(_ tool: String, _ source: String, _ destination: String, count: Int) throws -> Double {
        var total = 0.0
        for i in 0..<count {
            let run = try forkExec([tool, smallFilePath(source, i), smallFilePath(destination, i)])
            guard run.status == 0 else { throw BenchError("cp: \(describeWaitStatus(run.status))") }
            total += run.seconds
        }
        return total
    }
}

extension Bench {
    func copyFileCases() -> [Case] {
        var cases: [Case] = []
        for (workload, dir) in [(Workload.copyfile, workspace.smallFiles), (.copyfile12, workspace.readFiles)] {
            let (count, timeout) = (options.files, timeout)
            cases += [
                Case(workload: workload, system: "ringio-async", label: "RingIO IO.copyFile, from a task", check: .identical) {
                    [unowned self] in
                    try copyTree("ringio-async", from: dir, create: true) { source, destination in
                        try CopyFileCases.ringio(source, destination, count: count, onRing: false, timeout: timeout)
                    }
                },
                Case(workload: workload, system: "ringio-async-ring", label: "RingIO IO.copyFile, from a task on IOEngine.queue",
                     check: .identical) {
                    [unowned self] in
                    try copyTree("ringio-async-ring", from: dir, create: true) { source, destination in
                        try CopyFileCases.ringio(source, destination, count: count, onRing: true, timeout: timeout)
                    }
                },
                Case(workload: workload, system: "plain", label: "open/read/write/close loop", check: .identical) {
                    [unowned self] in
                    try copyTree("plain", from: dir, create: true) { source, destination in
                        try PlainCases.copyFiles(source, destination, count: count)
                    }
                },
            ]
            if let cp {
                cases.append(Case(workload: workload, system: "cp", label: "cp SRC DST, one process per file", check: .identical) {
                    [unowned self] in
                    try copyTree("cp", from: dir, create: true) { source, destination in
                        try CopyFileCases.cp(cp, source, destination, count: count)
                    }
                })
            }
        }
        return cases
    }
}
