// micro: the foundation's benchmarks, each beside its anchor in the same run.
//
//   swift run -c release --package-path Benchmarks micro [--rounds 5] [--items 1000000]
//
// - Queue hop: N empty `async` items onto a serial and onto a concurrent
//   queue (the last one a barrier that signals), RingIO's IOQueue beside
//   Dispatch's DispatchQueue; items/s.
// - Engine: N NOP requests through the shared engine, at most 4,096
//   outstanding; requests/s.
// - Read round trip: one 4 KiB read at a random offset of a cached 64 MiB
//   file, from submission until its handler runs on a queue; p50 and p99.
//   Anchors: the same read with DispatchIO (random channel) and a plain pread.
//
// Systems alternate within each round (A B A B ...) and the medians of the
// rounds are reported, with min–max, and each anchor's ratio to RingIO.
#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization
import BenchSupport
@_spi(Engine) import RingIO

// MARK: - harness

func human(_ rate: Double) -> String {
    if rate >= 1e6 { return fixed(rate / 1e6, 2) + " M/s" }
    if rate >= 1e3 { return fixed(rate / 1e3, 1) + " k/s" }
    return fixed(rate, 0) + " /s"
}


var rounds = 5
var items = 1_000_000
var args = CommandLine.arguments.dropFirst().makeIterator()
while let a = args.next() {
    switch a {
    case "--rounds": rounds = Int(args.next() ?? "") ?? rounds
    case "--items": items = Int(args.next() ?? "") ?? items
    default:
        print("usage: micro [--rounds N (5)] [--items N (1000000)]")
        exit(a == "--help" || a == "-h" ? 0 : 2)
    }
}

// MARK: - queue hop

func ringHop(kind: IOQueue.Kind, n: Int) -> Double {
    let queue = IOQueue(label: "hop", kind: kind)
    let group = IOGroup()
    group.enter()
    let t0 = now()
    for _ in 0..<n { queue.async {} }
    queue.asyncBarrier { group.leave() }
    group.wait()
    return Double(n) / (Double(now() - t0) / 1e9)
}

func dispatchHop(concurrent: Bool, n: Int) -> Double {
    let queue = concurrent ? DispatchQueue(label: "hop", attributes: .concurrent) : DispatchQueue(label: "hop")
    let sema = DispatchSemaphore(value: 0)
    let t0 = now()
    for _ in 0..<n { queue.async {} }
    queue.async(flags: .barrier) { sema.signal() }
    sema.wait()
    return Double(n) / (Double(now() - t0) / 1e9)
}

// MARK: - engine NOPs

func engineNops(n: Int) -> Double {
    let engine = IOEngine.shared
    let window = DispatchSemaphore(value: 4096)
    let group = IOGroup()
    let t0 = now()
    var batch: [IORequest] = []
    batch.reserveCapacity(64)
    for i in 0..<n {
        window.wait()
        group.enter()
        batch.append(IORequest(.nop) { _ in
            window.signal()
            group.leave()
        })
        if batch.count == 64 || i == n - 1 {
            engine.submit(contentsOf: batch)
            batch.removeAll(keepingCapacity: true)
        }
    }
    group.wait()
    return Double(n) / (Double(now() - t0) / 1e9)
}

// MARK: - 4 KiB read round trip

let fileSize = 64 << 20
let path = "/tmp/ringio-micro-\(getpid()).bin"
let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
precondition(fd >= 0, "cannot create \(path)")
do {
    var block = [UInt8](repeating: 0, count: 1 << 20)
    for i in block.indices { block[i] = UInt8(truncatingIfNeeded: i &* 31 &+ 7) }
    for _ in 0..<(fileSize >> 20) { precondition(write(fd, block, block.count) == block.count) }
}

final class ReadBuffer: @unchecked Sendable {
    // @unchecked: one request at a time uses the bytes; the latch orders them.
    let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 4096)
    deinit { bytes.deallocate() }
}

struct Offsets {
    var x: UInt64 = 0x1234_5678
    mutating func next() -> Int64 {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17
        return Int64(x % UInt64(fileSize / 4096)) * 4096
    }
}

func percentile(_ xs: [UInt64], _ p: Double) -> Double {
    let s = xs.sorted()
    return Double(s[min(s.count - 1, Int(Double(s.count) * p))]) / 1000
}

let samples = 20_000

/// Runs `samples` 4 KiB reads one after another at random offsets:
/// `issue(offset, finished)` starts one, and `finished()` marks where its
/// latency ends (in the handler, on whatever thread or queue that runs).
func sampleLatencies(_ issue: (Int64, @escaping @Sendable () -> Void) -> Void) -> [UInt64] {
    let sema = DispatchSemaphore(value: 0)
    let latency = Mutex<UInt64>(0)
    var offsets = Offsets()
    var out: [UInt64] = []
    out.reserveCapacity(samples)
    for _ in 0..<samples {
        let t0 = now()
        issue(offsets.next()) {
            latency.withLock { $0 = now() - t0 }
            sema.signal()
        }
        sema.wait()
        out.append(latency.withLock { $0 })
    }
    return out
}

/// The engine alone: submission until the completion runs on the ring thread.
func ringEngineOnly() -> [UInt64] { engineOnly(nop: false) }
/// A NOP through the engine: the cost of the thread handoff alone.
func ringNopOnly() -> [UInt64] { engineOnly(nop: true) }

func engineOnly(nop: Bool) -> [UInt64] {
    let buffer = ReadBuffer()
    return sampleLatencies { offset, finished in
        let op: IORequest.Operation = nop ? .nop : .read(fd: fd, buffer: buffer.bytes, offset: offset)
        IOEngine.shared.submit(IORequest(op, owner: buffer) { res in
            precondition(res == (nop ? 0 : 4096))
            finished()
        })
    }
}

func ringRoundTrip() -> [UInt64] {
    let queue = IOQueue(label: "rt")
    let buffer = ReadBuffer()
    return sampleLatencies { offset, finished in
        IOEngine.shared.submit(IORequest(.read(fd: fd, buffer: buffer.bytes, offset: offset), owner: buffer) { res in
            queue.async {
                precondition(res == 4096)
                finished()
            }
        })
    }
}

// DispatchIO adds the fd position at channel creation to random offsets: start at 0.
_ = lseek(fd, 0, SEEK_SET)
let dispatchChannel = DispatchIO(type: .random, fileDescriptor: fd, queue: .global(), cleanupHandler: { _ in })

func dispatchRoundTrip() -> [UInt64] {
    let queue = DispatchQueue(label: "rt")
    return sampleLatencies { offset, finished in
        let got = Mutex(0)
        dispatchChannel.read(offset: off_t(offset), length: 4096, queue: queue) { done, data, error in
            let total = got.withLock { $0 += data?.count ?? 0; return $0 }
            guard done else { return }
            if !(error == 0 && total == 4096) { print("DispatchIO read returned \(total) bytes, error \(error)"); exit(1) }
            finished()
        }
    }
}

func preadRoundTrip() -> [UInt64] {
    let buffer = ReadBuffer()
    return sampleLatencies { offset, finished in
        precondition(pread(fd, buffer.bytes.baseAddress, 4096, off_t(offset)) == 4096)
        finished()
    }
}

// MARK: - run

print("RingIO micro benchmarks: \(rounds) rounds, \(items) items; engine backend: \(IOEngine.shared.backend)"
      + (IOEngine.shared.fallbackReason.map { " (\($0))" } ?? ""))
print("machine: \(sysconf(Int32(_SC_NPROCESSORS_ONLN))) cores")

var rates: [String: [Double]] = [:]
var lat: [String: [(Double, Double)]] = [:]
for round in 1...rounds {
    rates["RingIO serial", default: []].append(ringHop(kind: .serial, n: items))
    rates["Dispatch serial", default: []].append(dispatchHop(concurrent: false, n: items))
    rates["RingIO concurrent", default: []].append(ringHop(kind: .concurrent, n: items))
    rates["Dispatch concurrent", default: []].append(dispatchHop(concurrent: true, n: items))
    rates["RingIO engine NOP", default: []].append(engineNops(n: items))
    for (name, f) in [("RingIO", ringRoundTrip), ("RingIO engine only (no hop)", ringEngineOnly), ("RingIO NOP, engine only", ringNopOnly), ("DispatchIO", dispatchRoundTrip), ("pread (blocking, no hop)", preadRoundTrip)] {
        let xs = f()
        lat[name, default: []].append((percentile(xs, 0.5), percentile(xs, 0.99)))
    }
    FileHandleless.err("round \(round)/\(rounds) done\n")
}

enum FileHandleless {
    static func err(_ s: String) { var b = Array(s.utf8); _ = write(2, &b, b.count) }
}

@MainActor func rateRow(_ name: String, anchor: String?) {
    let xs = rates[name]!
    var row = pad(name, 22) + lpad(human(median(xs)), 12) + "   " + pad(human(xs.min()!) + " – " + human(xs.max()!), 26)
    if let anchor {
        row += "RingIO / \(anchor): " + fixed(median(xs) / median(rates[anchor]!), 2) + "×"
    }
    print(row)
}

print("\nQueue hop (\(items) empty items; median, min – max)")
rateRow("RingIO serial", anchor: "Dispatch serial")
rateRow("Dispatch serial", anchor: nil)
rateRow("RingIO concurrent", anchor: "Dispatch concurrent")
rateRow("Dispatch concurrent", anchor: nil)
print("\nEngine (\(items) NOP requests, 4096 outstanding)")
rateRow("RingIO engine NOP", anchor: nil)
print("\n4 KiB random read, submit → handler on a queue (\(samples) reads per round; median of rounds, µs)")
let ringP50 = median(lat["RingIO"]!.map(\.0))
for name in ["RingIO", "RingIO engine only (no hop)", "RingIO NOP, engine only", "DispatchIO", "pread (blocking, no hop)"] {
    let p50 = median(lat[name]!.map(\.0)), p99 = median(lat[name]!.map(\.1))
    print(pad(name, 30) + "p50 " + lpad(fixed(p50, 1), 6) + "   p99 " + lpad(fixed(p99, 1), 7)
          + (name == "RingIO" ? "" : "   p50 ratio to RingIO: " + fixed(p50 / ringP50, 2) + "×"))
}
print("\nDataChunk beside DispatchData (best of 3; time per operation)")
let dataRows = dataChunkBenchmarks()
for row in dataRows {
    print(pad(row.name, 40) + "RingIO " + lpad(formatTime(row.ring), 10) + "   DispatchData " + lpad(formatTime(row.dispatch), 10)
          + "   DispatchData / RingIO: " + fixed(row.dispatch / row.ring, 1) + "×"
          + (row.array.map { "   [UInt8] " + formatTime($0) + ", RingIO / [UInt8]: " + fixed(row.ring / $0, 1) + "×" } ?? ""))
}
close(fd)
unlink(path)
