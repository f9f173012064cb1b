#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOEngine
@testable import RingIOBase

/// Where the calling thread is: "ring" on the engine's ring thread, else "other".
func currentThreadName(_ engine: IOEngine) -> String {
    engine.uring?.isRingThread == true ? "ring" : "other"
}

/// An actor whose executor is an engine's ring queue.
actor RingCounter {
    let queue: IOQueue
    init(queue: IOQueue) { self.queue = queue }
    nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }
    var bytes = 0
    var threads: Set<String> = []
    func read(_ channel: IOChannel, engine: IOEngine, offsets: [Int64]) async throws -> [UInt8] {
        var out: [UInt8] = []
        for offset in offsets {
            let chunk = try await channel.read(offset: offset, length: 4096)
            threads.insert(currentThreadName(engine))
            bytes += chunk.count
            out += Array(chunk)
        }
        return out
    }
}

@Suite("IOEngine.queue: work on the ring thread")
struct RingQueueTests {
    @Test("items run in order, one at a time; on io_uring on the ring thread", arguments: allBackends)
    func order(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let queue = engine.queue
        #expect(queue.kind == .serial)
        let seen = Locked<[Int]>([])
        let names = Locked<Set<String>>([])
        let running = Locked(0)
        let overlap = Locked(false)
        let latch = Latch()
        for i in 0..<2000 {
            queue.async {
                let n = running.withLock { $0 += 1; return $0 }
                if n > 1 { overlap.withLock { $0 = true } }
                seen.withLock { $0.append(i) }
                names.withLock { _ = $0.insert(currentThreadName(engine)) }
                // Items enqueued from the queue itself run after the earlier ones.
                if i == 1999 { queue.async { latch.signal() } }
                running.withLock { $0 -= 1 }
            }
        }
        #expect(latch.wait())
        #expect(seen.withLock { $0 } == Array(0..<2000))
        #expect(!overlap.withLock { $0 })
        #expect(queue.sync { queue.isCurrent })
        if backend == .ioUring {
            #expect(names.withLock { $0 } == ["ring"])
        } else {
            #expect(!names.withLock { $0 }.contains("ring"))
        }
    }

    @Test("reads chained from handlers on the ring queue return the right bytes", arguments: allBackends)
    func chainedReads(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(1 << 20, seed: 91)
        try writeFile(dir.file("f"), bytes)
        let fd = try openFile(dir.file("f"), .readOnly)
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: engine.queue, engine: engine) { _ in
            try? fd.close()
        }
        let offsets: [Int64] = (0..<3000).map { Int64(($0 * 7919) % 255) * 4096 }
        let got = Locked<[[UInt8]]>([])
        let names = Locked<Set<String>>([])
        let failure = Locked<String?>(nil)
        let done = Latch()
        let enters = engine.enterCalls
        @Sendable func step(_ i: Int) {
            guard i < offsets.count else { done.signal(); return }
            let collected = Locked<[UInt8]>([])
            channel.read(offset: offsets[i], length: 4096, queue: engine.queue) { finished, data, error in
                names.withLock { _ = $0.insert(currentThreadName(engine)) }
                if let data { collected.withLock { $0 += Array(data) } }
                guard finished else { return }
                if let error { failure.withLock { $0 = "read \(i): \(error)" }; done.signal(); return }
                got.withLock { $0.append(collected.withLock { $0 }) }
                step(i + 1)  // submitted from the ring queue
            }
        }
        engine.queue.async { step(0) }
        #expect(done.wait(timeout: .seconds(60)))
        #expect(failure.withLock { $0 } == nil)
        let results = got.withLock { $0 }
        #expect(results.count == offsets.count)
        for (i, r) in results.enumerated() where r != Array(bytes[Int(offsets[i])..<Int(offsets[i]) + 4096]) {
            Issue.record("read \(i) at \(offsets[i]) returned the wrong bytes")
            break
        }
        if backend == .ioUring {
            #expect(names.withLock { $0 } == ["ring"])
            // One io_uring_enter per read and its completion, not several.
            let perRead = Double(engine.enterCalls - enters) / Double(offsets.count)
            #expect(perRead < 2.5, "io_uring_enter calls per read: \(perRead)")
        }
        channel.close()
    }

    @Test("an awaited read in a task on the ring queue resumes there", arguments: allBackends)
    func asyncOnRing(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(256 * 4096, seed: 92)
        try writeFile(dir.file("f"), bytes)
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                    queue: engine.queue, engine: engine)
        let offsets: [Int64] = (0..<500).map { Int64(($0 * 37) % 256) * 4096 }
        let (got, names) = try await Task(executorPreference: engine.queue) { () async throws -> ([UInt8], Set<String>) in
            var out: [UInt8] = []
            var names: Set<String> = []
            for offset in offsets {
                let chunk = try await channel.read(offset: offset, length: 4096)
                names.insert(currentThreadName(engine))
                #expect(engine.queue.isCurrent)
                out += Array(chunk)
            }
            return (out, names)
        }.value
        let expected = offsets.flatMap { bytes[Int($0)..<Int($0) + 4096] }
        #expect(got == expected)
        if backend == .ioUring { #expect(names == ["ring"]) }

        let counter = RingCounter(queue: engine.queue)
        let viaActor = try await counter.read(channel, engine: engine, offsets: Array(offsets.prefix(100)))
        #expect(viaActor == Array(expected.prefix(100 * 4096)))
        if backend == .ioUring { #expect(await counter.threads == ["ring"]) }
        channel.close()
    }

    @Test("after the engine shuts down its queue still runs items (on the pool)", arguments: allBackends)
    func afterShutdown(backend: IOEngine.Backend) throws {
        var engine: IOEngine? = try makeEngine(backend)
        let queue = engine!.queue
        engine = nil
        let latch = Latch(count: 100)
        for _ in 0..<100 { queue.async { latch.signal() } }
        #expect(latch.wait())
    }
}

@Suite("IdleSpin: polling stops on a busy machine")
struct IdleSpinTests {
    @Test("a poll that loses its CPU pauses polling; work seen is reported")
    func preempted() {
        let spin = IdleSpin(budget: 50_000_000)
        #expect(spin.allowed)
        // Work that is already there is seen at once.
        #expect(spin.poll { true })
        // A gap between two looks at the clock (here a sleep inside the check,
        // as a preemption would make one) stops the poll and pauses polling.
        var calls = 0
        let saw = spin.poll {
            calls += 1
            if calls == 1 { sleepNanoseconds(2_000_000) }
            return false
        }
        #expect(!saw)
        #expect(spin.preemptedPolls == 1)
        #expect(!spin.allowed)
        var polled = false
        #expect(!spin.poll { polled = true; return true })
        #expect(!polled)
    }

    @Test("preempted polls in a streak pause polling longer each time, up to 32×; a streak ends after 10 s without one")
    func pauseGrowsInAStreak() {
        let spin = IdleSpin(budget: 1_000)
        let base = IdleSpin.pauseNanoseconds
        var t: UInt64 = 1_000_000_000
        #expect(spin.notePreemption(now: t) == t + base)
        for factor: UInt64 in [2, 4, 8, 16, 32, 32] {
            t += 1_000_000
            #expect(spin.notePreemption(now: t) == t + base * factor)
        }
        t += IdleSpin.streakNanoseconds + 1
        #expect(spin.notePreemption(now: t) == t + base)
        #expect(spin.preemptedPolls == 8)
    }

    @Test("a poller silent for longer than the stall limit counts as stalled; each look refreshes it")
    func stalledPoller() {
        let spin = IdleSpin(budget: 1_000)
        let t = monotonicNanoseconds()
        spin.announce(now: t)
        #expect(!spin.pollerStalled(now: t + IdleSpin.stallNanoseconds))
        #expect(spin.pollerStalled(now: t + IdleSpin.stallNanoseconds + 1))
        // A look newer than the caller's clock is fresh.
        #expect(!spin.pollerStalled(now: t - 1))
        // A poll's looks at the clock move the mark forward.
        spin.announce(now: 0)
        let before = monotonicNanoseconds()
        _ = spin.poll { false }
        #expect(!spin.pollerStalled(now: before + IdleSpin.stallNanoseconds))
    }

    @Test("no budget: never polls")
    func off() {
        let spin = IdleSpin(budget: 0)
        #expect(!spin.allowed)
        var polled = false
        #expect(!spin.poll { polled = true; return true })
        #expect(!polled)
    }
}

@Suite("IOEngine.perCore")
struct PerCoreTests {
    @Test("one engine per core, the first is shared; next() spreads channels and reads work on each")
    func spread() throws {
        let engines = IOEngine.perCore
        #expect(engines.count == Swift.max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        #expect(engines[0] === IOEngine.shared)
        #expect(Set(engines.map { ObjectIdentifier($0) }).count == engines.count)
        #expect(Set(engines.map { ObjectIdentifier($0.queue) }).count == engines.count)
        for e in engines { #expect(e.backend == IOEngine.shared.backend) }
        let picked = (0..<(2 * engines.count)).map { _ in ObjectIdentifier(IOEngine.next()) }
        #expect(Set(picked).count == engines.count)

        let dir = TemporaryDirectory()
        let bytes = randomBytes(64 * 1024, seed: 93)
        try writeFile(dir.file("f"), bytes)
        for engine in engines {
            let fd = try openFile(dir.file("f"), .readOnly)
            let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: engine.queue, engine: engine) { _ in
                try? fd.close()
            }
            let got = Locked<[UInt8]>([])
            let latch = Latch()
            channel.read(offset: 4096, length: 8192, queue: engine.queue) { done, data, _ in
                if let data { got.withLock { $0 += Array(data) } }
                if done { latch.signal() }
            }
            #expect(latch.wait())
            #expect(got.withLock { $0 } == Array(bytes[4096..<12288]))
            channel.close()
        }
    }
}
