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
@testable import RingIOBase

/// 50,000 random reads over 100 channels, about half of them closed with
/// `close(stop: true)` while their reads are queued: every read ends once,
/// delivered bytes are the file's, and the peak RSS of the process (a child,
/// so that the figure is its own) stays bounded.
@Suite("Engine: cancellation storms")
struct CancelStormTests {
    /// Peak RSS allowed, in MiB, from the design: the child's own ~23 MiB at
    /// start (runtime, test binary, the 8 MiB file's bytes), plus the
    /// engine's read budget (`ReadBudget.defaultLimit`, 32 MiB: the buffers
    /// of reads not yet delivered, pooled ones included), plus the 50,000
    /// queued operations themselves (under 1 KiB each), plus slack for
    /// the allocator. Measured (debug build, shared 2-core machine, both
    /// children at once): io_uring ~70 MiB, thread pool ~82 MiB; before the
    /// budget, every started read held its buffer from the start, even
    /// while it waited in the engine's backlog: io_uring 400 MiB (1.29 GB
    /// before O(1) cancels), thread pool 220–300 MiB.
    static let peakLimitMiB = 23 + ReadBudget.defaultLimit / (1 << 20) + 50 + 23

    @Test("50,000 random reads with random close(stop:)s: bounded memory", arguments: allBackends)
    func cancelStormMemory(backend: IOEngine.Backend) async throws {
        _ = try makeEngine(backend)
        let useRing = backend == .ioUring
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            [useRing = useRing as Bool] in
            ChildChecks.run { checks in try cancelStormChild(useRing: useRing, checks) }
        }
        ChildChecks.report(result)
        if let result {
            for line in String(decoding: result.standardErrorContent, as: UTF8.self).split(separator: "\n")
            where line.hasPrefix("cancel storm") { print(line) }
        }
    }
}

private func cancelStormChild(useRing: Bool, _ checks: ChildChecks) throws {
    let engine = try childEngine(useRing: useRing)
    let dir = TemporaryDirectory()
    let path = dir.file("storm")
    let content = randomBytes(8 * MiB, seed: 28)
    try writeFile(path, content)
    var rng = SeededGenerator(seed: 0xCA5C_0000 + (useRing ? 1 : 2))
    let queue = IOQueue(label: "storm", kind: .concurrent)
    let group = IOGroup()
    let wrong = Atomic<Int>(0)
    let doubleDone = Atomic<Int>(0)
    let start = monotonicNanoseconds()
    let channels = 100, readsPerChannel = 500
    for _ in 0..<channels {
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        let stopAfter = Bool.random(using: &rng) ? Int.random(in: 0..<readsPerChannel, using: &rng) : nil
        for i in 0..<readsPerChannel {
            if i == stopAfter { channel.close(stop: true) }
            let length = Int.random(in: 1...(256 * KiB), using: &rng)
            let offset = Int.random(in: 0..<(content.count - length), using: &rng)
            let dones = Atomic<Int>(0)
            group.enter()
            channel.read(offset: Int64(offset), length: length, queue: queue) { done, data, error in
                if let data, !data.isEmpty, data.first != content[offset] {
                    wrong.add(1, ordering: .relaxed)
                }
                if done {
                    if error != nil && error != .canceled { wrong.add(1, ordering: .relaxed) }
                    if dones.add(1, ordering: .relaxed).newValue == 1 { group.leave() } else {
                        doubleDone.add(1, ordering: .relaxed)
                    }
                }
            }
        }
        if stopAfter == nil { channel.close(stop: Bool.random(using: &rng)) }
    }
    checks.check(group.wait(timeout: .seconds(300)), "the reads did not all end")
    let seconds = Double(monotonicNanoseconds() - start) / 1e9
    // VmHWM, the peak RSS of this process's own memory: getrusage's
    // ru_maxrss keeps the high-water mark of the process this child was
    // forked from across the exec (in a whole `swift test` run, the parent's
    // ~900 MiB, whatever this child used).
    let peakMiB = peakResidentKiB() / 1024
    let line = "cancel storm (\(useRing ? "io_uring" : "thread pool")): \(Int(Double(channels * readsPerChannel) / seconds)) reads/s, peak RSS \(peakMiB) MiB\n"
    _ = line.withCString { Glibc.write(2, $0, strlen($0)) }
    checks.check(wrong.load(ordering: .relaxed) == 0, "\(wrong.load(ordering: .relaxed)) reads had wrong bytes or errors")
    checks.check(doubleDone.load(ordering: .relaxed) == 0, "reads ended twice")
    // Under a sanitizer the figure is the sanitizer's (shadow memory, ASan's
    // quarantine of freed blocks): not checked there.
    checks.check(ringio_test_under_sanitizer() != 0 || peakMiB < CancelStormTests.peakLimitMiB,
                 "peak RSS \(peakMiB) MiB under a cancellation storm (limit \(CancelStormTests.peakLimitMiB) MiB)")
}

/// The peak resident set of this process's address space (VmHWM in
/// /proc/self/status), in KiB; 0 when it cannot be read.
private func peakResidentKiB() -> Int {
    let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return 0 }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n <= 0 { break }
        bytes += buffer[0..<n]
    }
    for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
    }
    return 0
}
