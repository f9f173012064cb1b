import Foundation
import RingIO
import SystemPackage
import Synchronization
import Testing
@testable import ringcp

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// ChannelCopy in process (on the shared engine): what the binary tests can
/// only hit by chance, made deterministic.
@Suite("ringcp's ChannelCopy")
struct ChannelCopyTests {
    /// Runs `copy` in a task, cancelled before it starts or (with `progress`)
    /// once bytes are written; returns how it ended, or nil when it had not
    /// returned within `timeout`. (The timeouts are long: when the whole
    /// target starts, other suites' process launches and file writes can
    /// hold the two cooperative threads for seconds.)
    static func run(_ copy: ChannelCopy, cancelFirst: Bool, progress: ringcp.Progress? = nil,
                    timeout: Duration = .seconds(60)) async -> String? {
        let outcome = Mutex<String?>(nil)
        // The copy's task runs on an IOQueue, not on Swift's cooperative
        // pool: in a whole `swift test` run, the ringcp tests' synchronous
        // waits for child processes can hold both cooperative threads for
        // longer than the timeout, so a task there could not even record
        // that the copy had ended. The outcome is then set as soon as the
        // copy ends, whenever this test's own task gets a thread back.
        let task = Task(executorPreference: IOQueue(label: "channel-copy-test")) {
            if cancelFirst { withUnsafeCurrentTask { $0?.cancel() } }
            let result: String
            do throws(CopyFailure) {
                try await copy.run()
                result = "copied"
            } catch {
                result = "failed: \(error.side) errno \(error.errno.rawValue)"
            }
            outcome.withLock { $0 = result }
        }
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        if let progress {
            while progress.bytesDone == 0 && outcome.withLock({ $0 }) == nil && clock.now < deadline {
                try? await Task.sleep(for: .microseconds(200))
            }
            task.cancel()
        }
        while clock.now < deadline {
            if let result = outcome.withLock({ $0 }) { return result }
            try? await Task.sleep(for: .milliseconds(5))
        }
        // Once more: this task may itself have waited past the deadline for a
        // cooperative thread (the whole suite in one process keeps them busy)
        // while the copy had long finished. That was the "hang" `swift test` saw.
        return outcome.withLock { $0 }
    }

    static func files(_ dir: Scratch, size: Int) throws -> (FileDescriptor, FileDescriptor) {
        try writeFile(dir.at("src"), randomBytes(size, seed: 61))
        let input = open(dir.at("src"), O_RDONLY | O_CLOEXEC)
        let output = open(dir.at("dst"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard input >= 0, output >= 0 else { throw TestFailure("open") }
        return (FileDescriptor(rawValue: input), FileDescriptor(rawValue: output))
    }

    @Test("a copy copies: every region, at its offset")
    func copies() async throws {
        let dir = Scratch()
        let size = (9 << 20) + 5
        let (input, output) = try Self.files(dir, size: size)
        defer { close(input.rawValue); close(output.rawValue) }
        ftruncate(output.rawValue, off_t(size))
        let regions: [Range<Int64>] = [0..<4096, (1 << 20)..<(6 << 20) + 3, Int64(size - 100)..<Int64(size)]
        let copy = ChannelCopy(source: input, destination: output, regions: regions, progress: nil)
        try await copy.run()
        #expect(copy.endedAt == nil)
        let source = try readFile(dir.at("src")), copied = try readFile(dir.at("dst"))
        for region in regions {
            let range = Int(region.lowerBound)..<Int(region.upperBound)
            #expect(copied[range] == source[range], "region \(region)")
        }
    }

    @Test("cancelled once bytes are written: returns ECANCELED (or finished), promptly")
    func cancelledDuringCopy() async throws {
        let dir = Scratch()
        let size = 32 << 20
        let (input, output) = try Self.files(dir, size: size)
        defer { close(input.rawValue); close(output.rawValue) }
        let devNull = open("/dev/null", O_WRONLY | O_CLOEXEC)
        defer { close(devNull) }
        for _ in 0..<3 {
            let progress: ringcp.Progress = .init(totalBytes: Int64(size), fd: devNull)
            let copy = ChannelCopy(source: input, destination: output, regions: [0..<Int64(size)], progress: progress)
            let outcome = await Self.run(copy, cancelFirst: false, progress: progress, timeout: .seconds(30))
            #expect(outcome == "failed: read errno \(ECANCELED)" || outcome == "copied", "outcome: \(outcome ?? "hung")")
        }
    }

    @Test("cancelled before run() starts: returns ECANCELED rather than hanging")
    func cancelledBeforeRun() async throws {
        let dir = Scratch()
        let (input, output) = try Self.files(dir, size: 1 << 20)
        defer { close(input.rawValue); close(output.rawValue) }
        let copy = ChannelCopy(source: input, destination: output, regions: [0..<(1 << 20)], progress: nil)
        let outcome = await Self.run(copy, cancelFirst: true, timeout: .seconds(60))
        // A regression test: the cancellation handler runs first and
        // finishes the copy before run() has stored its continuation.
        #expect(outcome == "failed: read errno \(ECANCELED)", "outcome: \(outcome ?? "hung")")
    }
}
