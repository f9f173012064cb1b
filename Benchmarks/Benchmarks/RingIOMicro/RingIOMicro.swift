// ordo-one micro benchmarks for RingIO's hot paths. Wall time on a shared
// 2-core machine drifts; the allocation counts do not, so CI checks those
// (`swift package benchmark thresholds check`).
import Benchmark
@_spi(Engine) import RingIO

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 1,
        scalingFactor: .kilo,
        maxDuration: .seconds(2),
        maxIterations: 50
    )

    Benchmark("IOQueue serial async hop") { benchmark in
        let queue = IOQueue(label: "bench")
        let group = IOGroup()
        for _ in benchmark.scaledIterations {
            group.enter()
            queue.async { group.leave() }
        }
        group.wait()
    }

    Benchmark("IOEngine NOP round trip") { benchmark in
        let engine = IOEngine.shared
        let group = IOGroup()
        for _ in benchmark.scaledIterations {
            group.enter()
            engine.submit(IORequest(.nop) { _ in group.leave() })
        }
        group.wait()
    }

    // DataChunk: concat and subrange allocate O(log regions) nodes at most.
    let piece = DataChunk(Array(repeating: UInt8(7), count: 16))
    var big = DataChunk.empty
    for _ in 0..<10_000 { big = big + piece }
    let tenThousand = big

    Benchmark("DataChunk concat onto 10,000 regions",
              configuration: .init(metrics: [.wallClock, .mallocCountTotal], scalingFactor: .one)) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(tenThousand + piece)
        }
    }

    Benchmark("DataChunk subrange of 10,000 regions",
              configuration: .init(metrics: [.wallClock, .mallocCountTotal], scalingFactor: .one)) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(tenThousand.subrange(40_000..<120_000))
        }
    }
}
