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
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

/// The engine's cap on read buffers (`ReadBudget`): reads past it wait,
/// holding no buffer, in order; a stopped one is let go of at once.
@Suite("Engine: read-buffer budget")
struct ReadBudgetTests {
    @Test("grants go out in order, as bytes come back; a request larger than the cap runs alone; withdrawn places are skipped")
    func grantsInOrder() {
        let budget = ReadBudget(limit: 4 * MiB, queue: IOQueue(label: "budget"))
        let log = Locked<[String]>([])
        let waiters = ["a", "b", "c", "d"].map { BudgetWaiter($0, log: log) }
        #expect(budget.take(3 * MiB, orQueue: waiters[0]).isTaken)
        // 2 MiB do not fit beside 3: b waits, and c waits behind it although 1 MiB would fit.
        let b = budget.take(2 * MiB, orQueue: waiters[1])
        let c = budget.take(1 * MiB, orQueue: waiters[2])
        let d = budget.take(8 * MiB, orQueue: waiters[3])  // larger than the cap
        #expect(!b.isTaken && !c.isTaken && !d.isTaken)
        if case .queued(let ticket) = c { budget.withdraw(ticket) }
        #expect(budget.statistics.waiting == 3)
        budget.give(3 * MiB)  // b is granted; d (8 MiB) waits until nothing is taken
        #expect(waitUntil { log.withLock { $0 } == ["b 2097152"] })
        budget.give(2 * MiB)
        #expect(waitUntil { log.withLock { $0 } == ["b 2097152", "d 8388608"] })
        budget.give(8 * MiB)
        #expect(budget.statistics.inUse == 0)
        #expect(budget.statistics.waiting == 0)
        // A newcomer takes at once when nobody waits.
        #expect(budget.take(1 * MiB, orQueue: waiters[0]).isTaken)
    }

    @Test("200 random reads of up to 1 MiB on a 2 MiB budget: every byte right, never more than 2 MiB taken",
          arguments: allBackends)
    func readsWaitForTheBudget(backend: IOEngine.Backend) throws {
        let engine = try budgetEngine(backend, limit: 2 * MiB)
        let dir = TemporaryDirectory()
        let path = dir.file("budget")
        let content = randomBytes(8 * MiB, seed: 41)
        try writeFile(path, content)
        let queue = IOQueue(label: "budget", kind: .concurrent)
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        defer { channel.close() }
        var rng = SeededGenerator(seed: 41)
        let group = IOGroup()
        let wrong = Atomic<Int>(0)
        let waitedSeen = Atomic<Int>(0)
        for _ in 0..<200 {
            let length = Bool.random(using: &rng) ? MiB : Int.random(in: 1...(200 * KiB), using: &rng)
            let offset = Int.random(in: 0...(content.count - length), using: &rng)
            let got = Atomic<Int>(0)
            group.enter()
            channel.read(offset: Int64(offset), length: length, queue: queue) { done, data, error in
                _ = waitedSeen.max(engine.readBudget.statistics.waiting, ordering: .relaxed)
                // Each piece's first and last bytes and the total (comparing
                // 100 MiB byte by byte is minutes under TSan).
                if let data, !data.isEmpty {
                    let at = offset + got.add(data.count, ordering: .relaxed).oldValue
                    if data.first != content[at] || data.last != content[at + data.count - 1] {
                        wrong.add(1, ordering: .relaxed)
                    }
                }
                if done {
                    if error != nil || got.load(ordering: .relaxed) != length { wrong.add(1, ordering: .relaxed) }
                    group.leave()
                }
            }
        }
        #expect(group.wait(timeout: .seconds(60)))
        #expect(wrong.load(ordering: .relaxed) == 0)
        let statistics = engine.readBudget.statistics
        #expect(statistics.peak <= 2 * MiB)
        #expect(waitedSeen.load(ordering: .relaxed) > 0, "no read ever waited: the test did not reach the cap")
        #expect(waitUntil { engine.readBudget.statistics.inUse == 0 })
        #expect(engine.readBudget.statistics.waiting == 0)
    }

    @Test("a read waiting for the budget: close(stop:) ends it at once and lets go of it; the next one runs when bytes come back",
          arguments: allBackends)
    func stopWhileWaiting(backend: IOEngine.Backend) throws {
        let engine = try budgetEngine(backend, limit: MiB)
        let dir = TemporaryDirectory()
        let path = dir.file("waiting")
        let content = randomBytes(MiB, seed: 42)
        try writeFile(path, content)
        let queue = IOQueue(label: "budget")
        // Something else holds the whole budget.
        let holder = BudgetWaiter("holder", log: Locked([]))
        #expect(engine.readBudget.take(MiB, orQueue: holder).isTaken)

        let stopped = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        let stoppedRead = Recorder(queue: queue)
        let sentinel = waitingRead(on: stopped, queue: queue, recorder: stoppedRead)
        #expect(waitUntil { engine.readBudget.statistics.waiting == 1 })
        stopped.close(stop: true)
        #expect(stoppedRead.wait(timeout: .seconds(5)))
        #expect(stoppedRead.shapes == [Shape(true, nil, .canceled)])
        // Its place in the queue no longer holds it (nor its handler).
        #expect(waitUntil(timeout: .seconds(5)) { sentinel.object == nil })

        let later = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        defer { later.close() }
        let laterRead = Recorder(queue: queue)
        later.read(offset: 0, length: MiB, queue: queue, handler: laterRead.handler)
        #expect(waitUntil { engine.readBudget.statistics.waiting == 1 })  // the withdrawn place was dropped
        #expect(!laterRead.isDone)
        // The bytes come back: the waiting read runs.
        engine.readBudget.give(MiB)
        #expect(laterRead.wait(timeout: .seconds(10)))
        #expect(laterRead.bytes == content)
        #expect(waitUntil { engine.readBudget.statistics.inUse == 0 })
    }

    @Test("reads that wait for a peer stay out of the budget: 40 blocked pipe reads on a 1 MiB budget, a file read still runs",
          arguments: allBackends)
    func blockedPipeReadsTakeNothing(backend: IOEngine.Backend) throws {
        let engine = try budgetEngine(backend, limit: MiB)
        let dir = TemporaryDirectory()
        let path = dir.file("file")
        let content = randomBytes(MiB, seed: 43)
        try writeFile(path, content)
        let queue = IOQueue(label: "budget", kind: .concurrent)
        var pipes: [(TestPipe, IOChannel, Recorder)] = []
        for _ in 0..<40 {
            let pipe = try TestPipe()
            let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
            let recorder = Recorder(queue: queue)
            channel.read(length: MiB, queue: queue, handler: recorder.handler)
            pipes.append((pipe, channel, recorder))
        }
        milliseconds(20)
        let file = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        defer { file.close() }
        let read = Recorder(queue: queue)
        file.read(offset: 0, length: MiB, queue: queue, handler: read.handler)
        #expect(read.wait(timeout: .seconds(10)))
        #expect(read.bytes == content)
        for (pipe, channel, recorder) in pipes {
            channel.close(stop: true)
            #expect(recorder.wait(timeout: .seconds(10)))
            pipe.closeAll()
        }
    }
}

/// Reads on `channel` with a handler that holds a new object; returns a weak
/// reference to that object.
private func waitingRead(on channel: IOChannel, queue: IOQueue, recorder: Recorder) -> WeakBox {
    let held = HeldObject()
    channel.read(offset: 0, length: MiB, queue: queue) { [held] done, data, error in
        _ = held
        recorder.handler(done, data, error)
    }
    return WeakBox(held)
}

private final class HeldObject: Sendable {}

private final class WeakBox: @unchecked Sendable {
    // @unchecked: `object` is a weak reference, read-only after init (the
    // runtime makes loading it thread-safe).
    weak var object: HeldObject?
    init(_ object: HeldObject) { self.object = object }
}

private final class BudgetWaiter: ReadBudgetWaiter {
    let name: String
    let log: Locked<[String]>
    init(_ name: String, log: Locked<[String]>) {
        self.name = name
        self.log = log
    }
    func readBudgetGranted(_ bytes: Int) { log.withLock { $0.append("\(name) \(bytes)") } }
}

private func budgetEngine(_ backend: IOEngine.Backend, limit: Int) throws -> IOEngine {
    do {
        var configuration = IOEngine.Configuration(ringEntries: 64, backend: backend)
        configuration.readBufferLimit = limit
        return try IOEngine(configuration: configuration)
    } catch {
        try Test.cancel("io_uring is unavailable here, skipping: \(IOEngine.explainSetupFailure(error))")
    }
}

extension ReadBudget.Outcome {
    var isTaken: Bool {
        if case .taken = self { return true }
        return false
    }
}
