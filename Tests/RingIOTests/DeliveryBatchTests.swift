#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

@Suite("Completions handed to queues in batches")
struct DeliveryBatchTests {
    /// Submits `count` NOPs at once; each one's completion enqueues its
    /// index on `queues[i % queues.count]`. Returns what each queue ran, in order.
    private func deliver(_ engine: IOEngine, count: Int, to queues: [IOQueue]) -> [[Int]]? {
        let seen = (0..<queues.count).map { _ in Locked<[Int]>([]) }
        let latch = Latch(count: count)
        let requests = (0..<count).map { i in
            IORequest(.nop) { _ in
                let q = i % queues.count
                queues[q].async {
                    seen[q].withLock { $0.append(i) }
                    latch.signal()
                }
            }
        }
        engine.submit(contentsOf: requests)
        guard latch.wait() else { return nil }
        return seen.map { s in s.withLock { $0 } }
    }

    @Test("a reap's completions for a concurrent queue reach the worker pool in one submission", arguments: allBackends)
    func concurrentQueue(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let queue = IOQueue(label: "batch-concurrent", kind: .concurrent)
        for round in 0..<20 {
            let before = engine.deliveryStatistics
            let seen = try #require(deliver(engine, count: 32, to: [queue]))
            #expect(seen[0].sorted() == Array(0..<32), "round \(round)")
            let after = engine.deliveryStatistics
            if backend == .ioUring {
                let items = after.items - before.items
                let batches = after.batches - before.batches
                let submissions = after.poolSubmissions - before.poolSubmissions
                #expect(items == 32, "round \(round)")
                // One hand-off per reap at most, however many completions it had
                // (one per completion before batching: 32).
                #expect(submissions <= batches, "round \(round): \(submissions) pool submissions for \(batches) reaps")
                #expect(batches >= 1 && batches <= items)
            } else {
                #expect(after == before, "the thread pool has no reaps to batch")
            }
        }
    }

    @Test("serial queues get a reap's items in order, with one pool submission for all of them", arguments: allBackends)
    func serialQueuesKeepOrder(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let queues = (0..<3).map { IOQueue(label: "batch-serial-\($0)") }
        for round in 0..<20 {
            let before = engine.deliveryStatistics
            let seen = try #require(deliver(engine, count: 48, to: queues))
            for q in 0..<3 {
                let mine = Array(stride(from: q, to: 48, by: 3))
                if backend == .ioUring {
                    // The ring reaps in submission order, and a batch keeps each queue's order.
                    #expect(seen[q] == mine, "round \(round), queue \(q)")
                } else {
                    #expect(seen[q].sorted() == mine, "round \(round), queue \(q)")
                }
            }
            let after = engine.deliveryStatistics
            if backend == .ioUring {
                #expect(after.items - before.items == 48)
                #expect(after.poolSubmissions - before.poolSubmissions <= after.batches - before.batches)
            }
        }
    }

    @Test("items for the ring queue still run on the ring thread, after the reap", arguments: allBackends)
    func ringQueueItems(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let before = engine.deliveryStatistics
        let names = Locked<Set<String>>([])
        let latch = Latch(count: 16)
        let requests = (0..<16).map { _ in
            IORequest(.nop) { _ in
                engine.queue.async {
                    names.withLock { _ = $0.insert(currentThreadName(engine)) }
                    latch.signal()
                }
            }
        }
        engine.submit(contentsOf: requests)
        #expect(latch.wait())
        let after = engine.deliveryStatistics
        if backend == .ioUring {
            #expect(names.withLock { $0 } == ["ring"])
            #expect(after.poolSubmissions == before.poolSubmissions, "the ring queue needs no pool thread")
            #expect(after.items - before.items == 16)
        } else {
            #expect(names.withLock { $0 } == ["other"])
        }
    }
}
