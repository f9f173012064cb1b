// fio with its io_uring engine, buffered, on the same page-cached file: the
// ceiling of what io_uring gives a C program on this machine.
import BenchSupport
import FoundationEssentials

struct Fio {
    let executable: String
    let version: String

    /// nil, with the reason, where fio is not installed.
    static func locate() -> Fio? {
        guard let path = which("fio") else { return nil }
        let version = (try? spawn([path, "--version"], timeout: 10))?.output
            .split(separator: "\n").first.map(String.init) ?? "fio"
        return Fio(executable: path, version: version)
    }

    private struct Report: Decodable {
        struct Job: Decodable {
            struct Side: Decodable {
                let io_bytes: Int64
                let bw_bytes: Double
                let iops: Double
            }
            let error: Int
            let read: Side
            let write: Side
        }
        let jobs: [Job]
    }

    /// Runs one job on `path` and returns its read side (or write side): (bytes/s, IO/s, bytes).
    private func run(_ path: String, _ job: [String], writes: Bool = false, timeout: Double) throws -> (bandwidth: Double, iops: Double, bytes: Int64) {
        let argv = [executable, "--name=throughput", "--filename=\(path)", "--ioengine=io_uring", "--direct=0",
                    "--invalidate=0", "--output-format=json"] + job
        let result = try spawn(argv, timeout: timeout)
        guard result.exitedCleanly else {
            throw BenchError("fio failed (\(result.statusDescription)): \(argv.joined(separator: " "))")
        }
        // fio can print warnings before the JSON document.
        guard let open = result.output.firstIndex(of: "{") else { throw BenchError("fio printed no JSON") }
        let report = try JSONDecoder().decode(Report.self, from: Data(result.output[open...].utf8))
        guard let first = report.jobs.first, first.error == 0 else {
            throw BenchError("fio job reported error \(report.jobs.first?.error ?? -1)")
        }
        let side = writes ? first.write : first.read
        return (side.bw_bytes, side.iops, side.io_bytes)
    }

    /// Sequential buffered read of the whole file, 1 MiB blocks, 8 in flight.
    func sequentialRead(_ path: String, size: Int, timeout: Double) throws -> Sample {
        let r = try run(path, ["--rw=read", "--bs=1M", "--iodepth=8", "--size=\(size)"], timeout: timeout)
        guard r.bytes == Int64(size) else { throw BenchError("fio read \(r.bytes) of \(size) bytes") }
        return Sample(rate: r.bandwidth)
    }

    /// `count` buffered random 4 KiB reads, `depth` in flight.
    func randomReads(_ path: String, size: Int, count: Int, depth: Int, timeout: Double) throws -> Sample {
        let r = try run(path, ["--rw=randread", "--bs=4k", "--iodepth=\(depth)", "--size=\(size)",
                               "--io_size=\(count * 4096)", "--norandommap", "--randseed=305419896"], timeout: timeout)
        guard r.bytes == Int64(count) * 4096 else { throw BenchError("fio read \(r.bytes / 4096) of \(count) blocks") }
        return Sample(rate: r.iops, note: "\(r.bytes / 4096) reads")
    }

    /// The append log's bytes written sequentially in records of its size
    /// to a new file, 8 in flight, then fsync (`--end_fsync`, inside fio's
    /// runtime): the seconds it took by fio's account (its process start
    /// and file setup left out).
    func appendLog(_ path: String, log: AppendLog, timeout: Double) throws -> Double {
        let r = try run(path, ["--rw=write", "--bs=\(log.recordSize)", "--iodepth=8", "--size=\(log.totalBytes)",
                               "--end_fsync=1", "--create_on_open=1"], writes: true, timeout: timeout)
        guard r.bytes == Int64(log.totalBytes) else { throw BenchError("fio wrote \(r.bytes) of \(log.totalBytes) bytes") }
        return Double(log.totalBytes) / r.bandwidth
    }
}
