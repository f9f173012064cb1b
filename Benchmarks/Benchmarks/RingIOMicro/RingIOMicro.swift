// ordo-one micro benchmarks for RingIO's hot paths: DataChunk operations, a
// queue hop, an engine round trip and a single 4 KiB read through a channel.
// Wall time on a shared 2-core machine drifts; allocation counts do not, so
// CI checks those against the thresholds in Benchmarks/Thresholds
// (scripts/bench-thresholds: `swift package benchmark thresholds check
// --metric mallocCountTotal`). Each benchmark's figure is per scaled
// iteration; `thresholds` below is how far a count may move before the check
// fails. Names have no spaces: benchmark 1.38 writes a threshold file with
// spaces turned into underscores but looks it up by the name as given.
#if canImport(Glibc)
import Glibc
#endif
import Benchmark
import Synchronization
@_spi(Engine) import RingIO
import SystemPackage

/// How far a benchmark's allocation count (p90, per iteration: 1,000 operations
/// where the scaling factor is kilo) may move either way before the check fails.
/// DataChunk's counts are exact; the queue, engine and channel counts move by a
/// few per thousand with scheduling (whether a pool thread parks, for one).
func allocations(within tolerance: Int) -> [BenchmarkMetric: BenchmarkThresholds] {
    [.mallocCountTotal: .init(absolute: [.p90: tolerance])]
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 1,
        scalingFactor: .kilo,
        maxDuration: .seconds(2),
        maxIterations: 50
    )

    Benchmark("IOQueue_serial_async_hop", configuration: .init(thresholds: allocations(within: 10))) { benchmark in
        let queue = IOQueue(label: "bench")
        let group = IOGroup()
        for _ in benchmark.scaledIterations {
            group.enter()
            queue.async { group.leave() }
        }
        group.wait()
    }

    Benchmark("IOEngine_NOP_round_trip", configuration: .init(thresholds: allocations(within: 20))) { benchmark in
        let engine = IOEngine.shared
        let group = IOGroup()
        for _ in benchmark.scaledIterations {
            group.enter()
            engine.submit(IORequest(.nop) { _ in group.leave() })
        }
        group.wait()
    }

    // One 4 KiB read of a page-cached file through a random channel, from
    // the call to its handler on a queue, one at a time. One group serves
    // every read (as a program waiting for its reads would keep one): the
    // count is RingIO's plus the handler closure's context, if any. Until
    // 2026-11 a new `IOGroup` per read added 4 allocations of the
    // benchmark's own (see Benchmarks/results/micro-and-allocations.md).
    let path = "/tmp/ringio-micro-\(getpid()).bin"
    let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    if fd >= 0 {
        unlink(path)
        let block = [UInt8](repeating: 0x5A, count: 1 << 20)
        _ = block.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        // A random channel's offsets count from the file position when it is
        // made: back to 0, or every read would be at the end of file (until
        // 2026-11 they were, and the benchmark measured 0-byte reads).
        _ = lseek(fd, 0, SEEK_SET)
        let channel = IOChannel(kind: .random, fileDescriptor: FileDescriptor(rawValue: fd), queue: IOQueue(label: "micro.read"))
        let handlerQueue = IOQueue(label: "micro.handler")
        // The reads must move 4 KiB each, or the count measures something else.
        let checked = IOGroup()
        let moved = Mutex(0)
        checked.enter()
        channel.read(offset: 4096, length: 4096, queue: handlerQueue) { done, data, _ in
            moved.withLock { $0 += data?.count ?? 0 }
            if done { checked.leave() }
        }
        checked.wait()
        precondition(moved.withLock { $0 } == 4096, "RingIOMicro: a 4 KiB read moved \(moved.withLock { $0 }) bytes")
        Benchmark("IOChannel_4KiB_read_round_trip", configuration: .init(thresholds: allocations(within: 250))) { benchmark in
            let group = IOGroup()
            for i in benchmark.scaledIterations {
                group.enter()
                channel.read(offset: Int64(i % 256) * 4096, length: 4096, queue: handlerQueue) { done, data, _ in
                    blackHole(data)
                    if done { group.leave() }
                }
                group.wait()
            }
        }
    } else {
        print("RingIOMicro: cannot create \(path) (errno \(errno)): the read round trip is not measured")
    }

    // 4 KiB stream writes queued at once on one stream channel (an append
    // log), from the calls to the last handler; the file is emptied in a
    // barrier after each batch of 1,000.
    let logPath = "/tmp/ringio-micro-log-\(getpid()).bin"
    let logFD = open(logPath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    if logFD >= 0 {
        unlink(logPath)
        let log = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: logFD), queue: IOQueue(label: "micro.log"))
        let logQueue = IOQueue(label: "micro.log.handler")
        let record = DataChunk([UInt8](repeating: 0xA5, count: 4096))
        Benchmark("IOChannel_4KiB_stream_write_queued", configuration: .init(thresholds: allocations(within: 250))) { benchmark in
            let group = IOGroup()
            for _ in benchmark.scaledIterations {
                group.enter()
                log.write(data: record, queue: logQueue) { done, _, _ in
                    if done { group.leave() }
                }
            }
            group.wait()
            benchmark.stopMeasurement()
            let emptied = IOGroup()
            emptied.enter()
            log.barrier {
                _ = ftruncate(logFD, 0)
                _ = lseek(logFD, 0, SEEK_SET)
                emptied.leave()
            }
            emptied.wait()
        }
    } else {
        print("RingIOMicro: cannot create \(logPath) (errno \(errno)): the queued stream write is not measured")
    }

    // DataChunk: concat and subrange allocate O(log regions) nodes at most.
    let piece = DataChunk(Array(repeating: UInt8(7), count: 16))
    var big = DataChunk.empty
    for _ in 0..<10_000 { big = big + piece }
    let tenThousand = big
    let megabyte = DataChunk(Array(repeating: UInt8(1), count: 1 << 20))

    Benchmark("DataChunk_concat_onto_10000_regions",
              configuration: .init(metrics: [.wallClock, .mallocCountTotal], scalingFactor: .one, thresholds: allocations(within: 1))) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(tenThousand + piece)
        }
    }

    Benchmark("DataChunk_subrange_of_10000_regions",
              configuration: .init(metrics: [.wallClock, .mallocCountTotal], scalingFactor: .one, thresholds: allocations(within: 1))) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(tenThousand.subrange(40_000..<120_000))
        }
    }

    Benchmark("DataChunk_subrange_and_map_of_1MiB",
              configuration: .init(metrics: [.wallClock, .mallocCountTotal], scalingFactor: .kilo, thresholds: allocations(within: 1))) { benchmark in
        for i in benchmark.scaledIterations {
            let slice = megabyte.subrange((i % 1024)..<(i % 1024 + 4096))
            blackHole(slice.map())
        }
    }

    Benchmark("DataChunk_apply_over_10000_regions",
              configuration: .init(metrics: [.wallClock, .mallocCountTotal], scalingFactor: .one, thresholds: allocations(within: 1))) { benchmark in
        for _ in benchmark.scaledIterations {
            var total = 0
            tenThousand.apply { _, _, bytes in total += bytes.count; return true }
            blackHole(total)
        }
    }
}
