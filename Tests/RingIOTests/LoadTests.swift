#if canImport(Glibc)
import Glibc
#endif
import CRingIOTestSupport
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOQueue
@testable import RingIOEngine
@testable import RingIOBase

/// 10,000 operations at once over 1,000 channels, in a child process (so that
/// its fd count and heap are its own): random sizes, water marks, intervals,
/// barriers and `close(stop:)`. Every handler sequence must be well formed,
/// every byte delivered or reported written must be the file's, and the fds,
/// the engine and the heap must come back after.
@Suite("Load")
struct LoadTests {
    @Test("10,000 concurrent operations over 1,000 channels", arguments: allBackends)
    func tenThousandOperations(backend: IOEngine.Backend) async throws {
        _ = try makeEngine(backend)
        let useRing = backend == .ioUring
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            [useRing = useRing as Bool] in
            ChildChecks.run { checks in try loadChild(useRing: useRing, checks) }
        }
        ChildChecks.report(result)
    }
}

/// The handler calls of one operation, checked as they come.
final class OperationLog: Sendable {
    struct State {
        var calls = 0
        var dones = 0
        var callsAfterDone = 0
        var data = DataChunk.empty
        var last: (data: DataChunk?, error: Errno?)?
    }
    let state = Locked(State())
    private let inside = Atomic<Int>(0)
    let overlaps = Atomic<Int>(0)
    private let group: IOGroup

    init(group: IOGroup) {
        self.group = group
        group.enter()
    }

    var handler: IOChannel.Handler {
        { [self] done, data, error in
            if inside.add(1, ordering: .acquiringAndReleasing).newValue != 1 { overlaps.add(1, ordering: .relaxed) }
            let first = state.withLock { s -> Bool in
                s.calls += 1
                if s.dones > 0 { s.callsAfterDone += 1 }
                if done {
                    s.dones += 1
                    s.last = (data, error)
                } else if let data {
                    s.data = s.data.concat(data)
                }
                return done && s.dones == 1
            }
            inside.subtract(1, ordering: .acquiringAndReleasing)
            if first { group.leave() }
        }
    }
}

private enum Planned {
    /// A read; `start` is its file offset where the test can know it (random
    /// channels: given; stream channels: tracked in submission order).
    case read(log: OperationLog, file: Int, offset: Int64, length: Int, stream: Bool, fdKey: Int)
    case write(log: OperationLog, file: Int, offset: Int64, bytes: [UInt8], stream: Bool)
}

private func loadChild(useRing: Bool, _ checks: ChildChecks) throws {
    var engine: IOEngine? = try childEngine(useRing: useRing)
    weak let weakEngine = engine
    let dir = TemporaryDirectory()
    var rng = SeededGenerator(seed: 0x5EED_0000 + (useRing ? 1 : 2))
    let queues = (0..<8).map { IOQueue(label: "load-\($0)", kind: $0 < 4 ? .serial : .concurrent) }

    // 85 input files of 64–128 KiB, read through 10 channels each; 100 output
    // files written at disjoint offsets by a random channel each; 50 output
    // files appended to by a stream path channel each: 1,000 channels.
    let inputs = (0..<85).map { randomBytes(64 * KiB + Int.random(in: 0...(64 * KiB), using: &rng), seed: UInt64(200 + $0)) }
    let writePool = randomBytes(MiB, seed: 300)
    for (i, bytes) in inputs.enumerated() { try writeFile(dir.file("in\(i)"), bytes) }
    // Warm-up, so that the baselines include the engine's threads and fds.
    do {
        let warm = try IOChannel(kind: .stream, path: FilePath(dir.file("in0")), mode: .readOnly, queue: queues[0],
                                 engine: engine!)
        let r = Recorder(queue: queues[0])
        warm.read(length: .max, queue: queues[0], handler: r.handler)
        checks.check(r.wait(), "warm-up read")
        warm.close()
        milliseconds(50)
    }

    var heapAfterRuns: [UInt] = []
    var fdsBefore: [Int32: String] = [:]
    for run in 0..<2 {
        fdsBefore = openFiles()
        let group = IOGroup()
        let cleanups = IOGroup()
        var channels: [IOChannel] = []
        var plans: [[Planned]] = []
        var inputFDs: [FileDescriptor] = []
        var ops = 0

        func randomSettings(_ channel: IOChannel) {
            switch Int.random(in: 0..<6, using: &rng) {
            case 0: channel.setHighWater([4 * KiB, 16 * KiB, 64 * KiB].randomElement(using: &rng)!)
            case 1: channel.setLowWater([KiB, 8 * KiB].randomElement(using: &rng)!)
            case 2: channel.setInterval(.milliseconds(1), strict: true)
            case 3: channel.setInterval(.milliseconds(2))
            default: break
            }
        }
        func makeChannel(_ make: (@escaping @Sendable (Errno?) -> Void) throws -> IOChannel) rethrows -> IOChannel {
            cleanups.enter()
            let channel = try make { _ in cleanups.leave() }
            randomSettings(channel)
            channels.append(channel)
            plans.append([])
            return channel
        }

        // Channels.
        var inputChannels: [(IOChannel, file: Int, stream: Bool, fdKey: Int)] = []
        for (i, _) in inputs.enumerated() {
            let fd = try openFile(dir.file("in\(i)"), .readOnly)
            inputFDs.append(fd)
            for c in 0..<10 {
                let queue = queues.randomElement(using: &rng)!
                let stream = c % 2 == 0
                let kind: IOChannel.Kind = stream ? .stream : .random
                if c < 7 {
                    // Three stream and four random channels share the fd (and its position).
                    let ch = makeChannel {
                        IOChannel(kind: kind, fileDescriptor: fd, queue: queue, engine: engine!, cleanup: $0)
                    }
                    inputChannels.append((ch, i, stream, i))
                } else {
                    let ch = try makeChannel {
                        try IOChannel(kind: kind, path: FilePath(dir.file("in\(i)")), mode: .readOnly, queue: queue,
                                      engine: engine!, cleanup: $0)
                    }
                    inputChannels.append((ch, i, stream, 1000 + channels.count))
                }
            }
        }
        var outputChannels: [(IOChannel, file: Int, stream: Bool)] = []
        for o in 0..<150 {
            let queue = queues.randomElement(using: &rng)!
            let stream = o >= 100
            let ch = try makeChannel {
                try IOChannel(kind: stream ? .stream : .random, path: FilePath(dir.file("out\(o)-\(run)")),
                              mode: stream ? .writeOnly : .readWrite, options: [.create, .truncate],
                              permissions: [.ownerReadWrite], queue: queue, engine: engine!, cleanup: $0)
            }
            outputChannels.append((ch, o, stream))
        }
        checks.check(channels.count == 1000, "\(channels.count) channels")

        // 10 operations per channel, interleaved across channels; a barrier
        // now and then; 10% of the channels closed with stop midway.
        let stopAt = (0..<channels.count).map { _ in Int.random(in: 0..<10, using: &rng) == 0 ? Int.random(in: 1..<10, using: &rng) : -1 }
        for round in 0..<10 {
            for (index, (channel, file, stream, fdKey)) in inputChannels.enumerated() {
                let queue = queues.randomElement(using: &rng)!
                let log = OperationLog(group: group)
                let size = inputs[file].count
                let offset = stream ? 0 : Int64(Int.random(in: 0..<size, using: &rng))
                let length = Int.random(in: 0..<20, using: &rng) == 0 ? Int.max : Int.random(in: 1...(32 * KiB), using: &rng)
                channel.read(offset: offset, length: length, queue: queue, handler: log.handler)
                plans[index].append(.read(log: log, file: file, offset: offset, length: length, stream: stream, fdKey: fdKey))
                ops += 1
                if Int.random(in: 0..<25, using: &rng) == 0 { channel.barrier {} }
                if stopAt[index] == round { channel.close(stop: true) }
            }
            for (j, (channel, file, stream)) in outputChannels.enumerated() {
                let index = inputChannels.count + j
                let queue = queues.randomElement(using: &rng)!
                let log = OperationLog(group: group)
                let count = Int.random(in: 1...(48 * KiB), using: &rng)
                let from = Int.random(in: 0...(writePool.count - count), using: &rng)
                let bytes = Array(writePool[from..<(from + count)])
                let offset = stream ? 0 : Int64(round * 64 * KiB)
                channel.write(offset: offset, data: DataChunk(bytes), queue: queue, handler: log.handler)
                plans[index].append(.write(log: log, file: file, offset: offset, bytes: bytes, stream: stream))
                ops += 1
                if Int.random(in: 0..<25, using: &rng) == 0 { channel.barrier {} }
                if stopAt[index] == round { channel.close(stop: true) }
            }
        }
        checks.check(ops == 10_000, "\(ops) operations")
        let finished = group.wait(timeout: .seconds(60))
        checks.check(finished, "run \(run): operations did not finish")
        milliseconds(50)  // a call after `done` would show up now

        // Every handler sequence is well formed.
        var failures = 0
        for plan in plans.joined() {
            let log: OperationLog
            switch plan {
            case .read(let l, _, _, _, _, _), .write(let l, _, _, _, _): log = l
            }
            let s = log.state.withLock { $0 }
            if s.dones != 1 || s.callsAfterDone != 0 || log.overlaps.load(ordering: .relaxed) != 0 {
                failures += 1
                if failures < 5 { checks.check(false, "malformed: \(s.calls) calls, \(s.dones) done, \(s.callsAfterDone) after") }
            }
        }
        checks.check(failures == 0, "\(failures) malformed handler sequences")

        // Reads: the file's bytes at the right offsets. Stream reads on one
        // fd run in submission order and move its position by what they read.
        var positions: [Int: Int] = [:]
        var readFailures = 0
        var canceled = 0
        for round in 0..<10 {
            for index in inputChannels.indices {
                guard case .read(let log, let file, let offset, let length, let stream, let fdKey) = plans[index][round] else { continue }
                let s = log.state.withLock { $0 }
                let all = s.data.concat(s.last?.data ?? .empty)
                let start = stream ? positions[fdKey, default: 0] : Int(offset)
                let content = inputs[file]
                let expectedFull = Swift.min(length, content.count - start)
                let error = s.last?.error
                if error == .canceled { canceled += 1 }
                let ok = all.count <= expectedFull && same(all, content[start..<(start + all.count)])
                    && (error != nil || all.count == expectedFull) && (error == nil || error == .canceled)
                if !ok {
                    readFailures += 1
                    if readFailures < 5 {
                        checks.check(false, "read of in\(file) at \(start) (\(stream ? "stream" : "random")), length \(length): got \(all.count) bytes, error \(error.map { "\($0)" } ?? "nil"), expected \(expectedFull)")
                    }
                }
                if stream { positions[fdKey] = start + all.count }
            }
        }
        checks.check(readFailures == 0, "\(readFailures) reads delivered wrong bytes")

        // Writes: what was reported written is on disk.
        for channel in channels { channel.close() }
        checks.check(cleanups.wait(timeout: .seconds(30)), "cleanup handlers did not all run")
        var writeFailures = 0
        for (j, (_, file, stream)) in outputChannels.enumerated() {
            // A path channel stopped before its first operation never created its file.
            let onDisk = (try? readFile(dir.file("out\(file)-\(run)"))) ?? []
            var expectedStream: [UInt8] = []
            for plan in plans[inputChannels.count + j] {
                guard case .write(let log, _, let offset, let bytes, _) = plan else { continue }
                let s = log.state.withLock { $0 }
                if s.last?.error == .canceled { canceled += 1 }
                let written = bytes.count - (s.last?.data?.count ?? 0)
                if (s.last?.error == nil) != (written == bytes.count) || (s.last?.error ?? .canceled) != .canceled {
                    writeFailures += 1
                }
                if stream {
                    expectedStream += bytes[0..<written]
                } else if written > 0 {
                    let o = Int(offset)
                    if onDisk.count < o + written || !same(DataChunk(bytes[0..<written]), onDisk[o..<(o + written)]) {
                        writeFailures += 1
                    }
                }
            }
            if stream && (onDisk.count < expectedStream.count
                          || !same(DataChunk(expectedStream), onDisk[0..<expectedStream.count])) { writeFailures += 1 }
        }
        checks.check(writeFailures == 0, "\(writeFailures) writes not on disk as reported")
        checks.check(canceled > 0, "no operation was cancelled: close(stop:) was not exercised")

        // Nothing leaks: the channels' fds are closed, the ones the test
        // opened too; the heap comes back (checked across the two runs).
        for fd in inputFDs { try fd.close() }
        channels.removeAll()
        plans.removeAll()
        inputChannels.removeAll()
        outputChannels.removeAll()
        milliseconds(100)
        // The thread pool's workers each hold a cancel eventfd; those beyond
        // the first four leave after 10 s idle, so eventfds are only bounded.
        let fdsAfter = openFiles()
        let files = { (fds: [Int32: String]) in fds.filter { $0.value != "anon_inode:[eventfd]" } }
        // By fd number: a name may change under us without a leak (an fd this
        // child inherited from the test process, whose file another test of
        // that process unlinks, reads back as "... (deleted)").
        let leaked = files(fdsAfter).filter { fdsBefore[$0.key] == nil }
        let lost = files(fdsBefore).filter { fdsAfter[$0.key] == nil }
        checks.check(leaked.isEmpty && lost.isEmpty,
                     "run \(run): fds opened and not closed: \(leaked); fds closed that were open before: \(lost)")
        // (Opens run on the blocking side of the pool: it may have more workers.)
        checks.check(fdsAfter.count - files(fdsAfter).count
                         <= ThreadPoolBackend.maximumThreads + ThreadPoolBackend.maximumBlockingThreads + 2,
                     "run \(run): \(fdsAfter.count - files(fdsAfter).count) eventfds")
        heapAfterRuns.append(heapWithoutIdleBuffers())
    }
    // The second run ends with the heap where the first ended (within 4 MiB;
    // the buffer pool keeps up to 32 idle 1 MiB buffers, reached in run one).
    let growth = Int(heapAfterRuns[1]) - Int(heapAfterRuns[0])
    checks.check(growth < 4 * MiB, "the heap grew by \(growth) bytes from run 1 to run 2")
    engine = nil
    checks.check(waitUntil { weakEngine == nil }, "the engine was not released: a channel or operation leaked")
}

/// Whether `chunk` holds exactly `bytes` (memcmp per region: fast in debug builds).
func same(_ chunk: DataChunk, _ bytes: ArraySlice<UInt8>) -> Bool {
    guard chunk.count == bytes.count else { return false }
    return bytes.withUnsafeBytes { expected in
        chunk.apply { _, offset, region in
            memcmp(region.baseAddress!, expected.baseAddress! + offset, region.count) == 0
        }
    }
}

/// The process's open fds and what each refers to.
func openFiles() -> [Int32: String] {
    var out: [Int32: String] = [:]
    var buffer = [CChar](repeating: 0, count: 256)
    for fd in Int32(0)..<4096 where fcntl(fd, F_GETFD) != -1 {
        let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        out[fd] = n > 0 ? String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
    }
    return out
}

/// The heap in use, without the buffer pool's idle buffers (which it keeps
/// on purpose): the ordinary ones are taken out and freed first; the
/// permanent ones (registrable, never freed) are taken out, not counted, and
/// given back.
func heapWithoutIdleBuffers() -> UInt {
    let pool = BufferPool.shared
    let taken = (0..<(pool.maximumIdle + BufferPool.registrableCount)).map { _ in pool.take() }
    for (buffer, slot) in taken where slot < 0 { free(buffer) }
    let permanent = taken.filter { $0.1 >= 0 }
    let inUse = ringio_test_heap_in_use(), held = UInt(permanent.count * pool.bufferSize)
    let heap = inUse > held ? inUse - held : 0
    for (buffer, slot) in permanent { pool.give(buffer, slot: slot) }
    return heap
}

