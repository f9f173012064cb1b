#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOSources
@testable import RingIOEngine
import RingIOBase

/// What a source's handlers saw, for the source tests.
final class SourceLog: Sendable {
    let deliveries = Locked<[UInt]>([])
    let times = Locked<[ContinuousClock.Instant]>([])
    let cancels = Atomic<Int>(0)
    let registrations = Atomic<Int>(0)
    let overlapping = Atomic<Int>(0)
    let running = Atomic<Int>(0)
    let cancelled = Latch()

    var count: Int { deliveries.withLock { $0.count } }
    var total: UInt { deliveries.withLock { $0.reduce(0, +) } }

    /// Installs handlers that record into this log.
    func attach(_ source: IOSource, onEvent: (@Sendable (UInt) -> Void)? = nil) {
        source.setEventHandler { [self] in
            if running.add(1, ordering: .relaxed).newValue > 1 { overlapping.add(1, ordering: .relaxed) }
            let now = ContinuousClock.now
            let data = source.data
            deliveries.withLock { $0.append(data) }
            times.withLock { $0.append(now) }
            onEvent?(data)
            running.subtract(1, ordering: .relaxed)
        }
        source.setCancelHandler { [self] in
            cancels.add(1, ordering: .relaxed)
            cancelled.signal()
        }
        source.setRegistrationHandler { [self] in
            registrations.add(1, ordering: .relaxed)
        }
    }
}

/// The engines a source test runs on: io_uring, io_uring acting as a kernel
/// before 5.13 (one-shot polls re-armed), and the thread pool.
enum SourceEngine: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case ioUring, oldKernel, threadPool
    var testDescription: String { rawValue }

    /// The cases whose backend `allBackends` selects (`RINGIO_TEST_BACKENDS`):
    /// all three unless scripts/test narrows them to one backend per run.
    static let tested: [SourceEngine] = allCases.filter {
        allBackends.contains($0 == .threadPool ? .threadPool : .ioUring)
    }

    func make() throws -> IOEngine {
        switch self {
        case .ioUring: return try makeEngine(.ioUring)
        case .threadPool: return try makeEngine(.threadPool)
        case .oldKernel:
            var configuration = IOEngine.Configuration(ringEntries: 64, backend: .ioUring)
            configuration.actsAsOldKernel = true
            do {
                return try IOEngine(configuration: configuration)
            } catch {
                try Test.cancel("io_uring is unavailable here, skipping: \(IOEngine.explainSetupFailure(error))")
            }
        }
    }
}

/// Runs `body` with a new engine of `variant`, then waits (60 s at most)
/// for the engine to be released; whether it was.
func isReleased(_ variant: SourceEngine, _ body: (IOEngine) throws -> Void) throws -> Bool {
    weak var released: IOEngine?
    try {
        let engine = try variant.make()
        released = engine
        try body(engine)
    }()
    return waitUntil(timeout: .seconds(60)) { released == nil }
}

/// A pipe whose ends close at deinit (unless closed before).
final class SourcePipe: @unchecked Sendable {
    // @unchecked: the fds are set at init and closed once, by the test's thread.
    var readFD: Int32
    var writeFD: Int32
    init(nonBlocking: Bool = false) {
        var fds: [Int32] = [0, 0]
        precondition(pipe(&fds) == 0)
        readFD = fds[0]
        writeFD = fds[1]
        if nonBlocking {
            _ = fcntl(readFD, F_SETFL, O_NONBLOCK)
            _ = fcntl(writeFD, F_SETFL, O_NONBLOCK)
        }
    }
    func write(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { Glibc.write(writeFD, $0.baseAddress, $0.count) } }
    func read(_ count: Int) -> Int {
        var buffer = [UInt8](repeating: 0, count: count)
        return Glibc.read(readFD, &buffer, count)
    }
    func closeWriter() { if writeFD >= 0 { close(writeFD); writeFD = -1 } }
    func closeReader() { if readFD >= 0 { close(readFD); readFD = -1 } }
    deinit {
        closeWriter()
        closeReader()
    }
}

/// Starts `/bin/sh -c script` as a child of the test process.
func spawnShell(_ script: String) -> pid_t {
    var pid: pid_t = 0
    let args = ["/bin/sh", "-c", script]
    var argv: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
    defer { for p in argv { free(p) } }
    let rc = posix_spawn(&pid, "/bin/sh", nil, nil, &argv, environ)
    precondition(rc == 0, "posix_spawn: \(rc)")
    return pid
}
