#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOQueue
@testable import RingIOBase

/// `IOQueue.sync` when every pool worker is waiting in one: ownership of a
/// serial queue passes straight to the next `sync` caller (or a caller runs
/// the async items ahead of it), so the pool cannot deadlock on itself.
@Suite("IOQueue: sync storms")
struct SyncStormTests {
    /// More items than the pool has threads (64 at most), each blocking a worker in `sync`.
    static let storm = WorkerPool.maximumThreads + 136

    @Test("200 items on the global queue that each sync onto one serial queue all finish")
    func globalItemsSyncOntoOneSerialQueue() {
        let serial = IOQueue(label: "storm-target")
        let inside = Atomic<Int>(0)
        let overlaps = Atomic<Int>(0)
        let done = Latch(count: Self.storm)
        for _ in 0..<Self.storm {
            IOQueue.global.async {
                serial.sync {
                    if inside.add(1, ordering: .acquiringAndReleasing).newValue != 1 {
                        overlaps.add(1, ordering: .relaxed)
                    }
                    usleep(100)
                    inside.subtract(1, ordering: .acquiringAndReleasing)
                }
                done.signal()
            }
        }
        #expect(done.wait(timeout: .seconds(30)), "items stuck in sync: the pool deadlocked on itself")
        #expect(overlaps.load(ordering: .relaxed) == 0)
    }

    @Test("sync callers behind async items run them in order when every worker waits in sync")
    func asyncItemsAheadOfSyncCallers() {
        let serial = IOQueue(label: "storm-mixed")
        // Touched only on `serial` (the exclusion under test).
        final class Log: @unchecked Sendable {
            // @unchecked: accessed only by items and sync blocks of one serial queue.
            var asyncRuns = 0
            var syncSawOwnAsync = 0
        }
        let log = Log()
        let done = Latch(count: Self.storm)
        for _ in 0..<Self.storm {
            IOQueue.global.async {
                let mine = Atomic<Bool>(false)
                serial.async {
                    log.asyncRuns += 1
                    mine.store(true, ordering: .releasing)
                }
                // FIFO: an async item submitted before this sync has run by now.
                serial.sync { if mine.load(ordering: .acquiring) { log.syncSawOwnAsync += 1 } }
                done.signal()
            }
        }
        guard done.wait(timeout: .seconds(30)) else {
            Issue.record("items stuck in sync behind async items: the pool deadlocked on itself")
            return
        }
        serial.sync {
            #expect(log.asyncRuns == Self.storm)
            #expect(log.syncSawOwnAsync == Self.storm)
        }
    }

    @Test("sync onto a suspended queue waits for resume, then runs after the earlier items")
    func syncOntoSuspendedQueue() {
        let serial = IOQueue(label: "storm-suspended")
        let order = Locked<[Int]>([])
        serial.suspend()
        serial.async { order.withLock { $0.append(1) } }
        let done = Latch()
        spawnThread(name: "sync-caller") {
            serial.sync { order.withLock { $0.append(2) } }
            done.signal()
        }
        #expect(!done.wait(timeout: .milliseconds(100)), "sync ran on a suspended queue")
        serial.resume()
        #expect(done.wait())
        #expect(order.withLock { $0 } == [1, 2])
    }

    @Test("handlers that sync onto other queues: 300 reads, none stuck", arguments: allBackends)
    func handlersThatSync(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("source")
        let content = randomBytes(64 * KiB, seed: 19)
        try writeFile(path, content)
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly,
                                    queue: .global, engine: engine)
        // Nested syncs always in the same order (first, then second): no lock-order cycle.
        let first = IOQueue(label: "handlers-first")
        let second = IOQueue(label: "handlers-second")
        let reads = 300
        let done = Latch(count: reads)
        let bad = Atomic<Int>(0)
        let total = Locked(0)
        for i in 0..<reads {
            let queue = i % 3 == 0 ? IOQueue.global : IOQueue(label: "handler-\(i)")
            let offset = (i * 211) % (content.count - 100)
            channel.read(offset: Int64(offset), length: 100, queue: queue) { isDone, data, error in
                if error != nil { bad.add(1, ordering: .relaxed) }
                if let data, !data.isEmpty {
                    if Array(data) != Array(content[offset..<(offset + data.count)]) { bad.add(1, ordering: .relaxed) }
                    second.async { total.withLock { $0 += data.count } }
                    first.sync {
                        second.sync { _ = usleep(50) }
                    }
                }
                if isDone { done.signal() }
            }
        }
        guard done.wait(timeout: .seconds(60)) else {
            Issue.record("a handler that syncs onto other queues never finished")
            return
        }
        #expect(bad.load(ordering: .relaxed) == 0)
        second.sync { #expect(total.withLock { $0 } == reads * 100) }
        channel.close()
    }
}
