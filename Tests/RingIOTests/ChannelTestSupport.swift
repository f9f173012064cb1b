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

/// The shape of one handler call: whether it ends the operation, how many
/// bytes it carries (nil when `data` is nil) and its error.
struct Shape: Equatable, Sendable, CustomStringConvertible {
    var done: Bool
    var count: Int?
    var error: Errno?
    init(_ done: Bool, _ count: Int?, _ error: Errno?) {
        self.done = done
        self.count = count
        self.error = error
    }
    var description: String {
        "(\(done), \(count.map { "\($0) bytes" } ?? "nil"), \(error.map { "\($0)" } ?? "nil"))"
    }
}

/// One recorded handler call of a channel operation.
struct Call: Sendable, CustomStringConvertible {
    let done: Bool
    let data: DataChunk?
    let error: Errno?
    /// Nanoseconds since the recorder was created.
    let time: UInt64
    /// Whether the call ran on the recorder's queue.
    let onQueue: Bool
    var shape: Shape { Shape(done, data?.count, error) }
    var description: String { shape.description }
}

/// Records the handler calls of one channel operation: their order, sizes,
/// errors and times, whether they ran on the expected queue, and whether two of
/// them ever overlapped.
final class Recorder: Sendable {
    let queue: IOQueue
    private let start = monotonicNanoseconds()
    private let entries = Locked<[Call]>([])
    private let inside = Atomic<Int>(0)
    private let overlapCount = Atomic<Int>(0)
    private let doneSeen = Atomic<Bool>(false)
    private let finished = Latch()
    private let holdNanoseconds: UInt64
    private let onCall: (@Sendable (Call) -> Void)?

    /// - Parameters:
    ///   - queue: the queue the handler is expected to run on.
    ///   - hold: how long each call stays inside the handler (makes overlaps visible).
    ///   - onCall: runs inside the handler after the call is recorded.
    init(queue: IOQueue, hold: Duration = .zero, onCall: (@Sendable (Call) -> Void)? = nil) {
        self.queue = queue
        let parts = hold.components
        holdNanoseconds = UInt64(parts.seconds) * 1_000_000_000 + UInt64(parts.attoseconds / 1_000_000_000)
        self.onCall = onCall
    }

    var handler: IOChannel.Handler {
        { [self] done, data, error in record(done, data, error) }
    }

    private func record(_ done: Bool, _ data: DataChunk?, _ error: Errno?) {
        if inside.add(1, ordering: .acquiringAndReleasing).newValue != 1 {
            overlapCount.add(1, ordering: .relaxed)
        }
        let call = Call(done: done, data: data, error: error,
                        time: monotonicNanoseconds() - start, onQueue: queue.isCurrent)
        entries.withLock { $0.append(call) }
        onCall?(call)
        if holdNanoseconds > 0 { sleepNanoseconds(holdNanoseconds) }
        inside.subtract(1, ordering: .acquiringAndReleasing)
        if done, !doneSeen.exchange(true, ordering: .acquiringAndReleasing) { finished.signal() }
    }

    /// Waits for the call with `done == true`; false on timeout.
    func wait(timeout: Duration = .seconds(10)) -> Bool { finished.wait(timeout: timeout) }

    /// Waits until at least `count` calls were recorded; false on timeout.
    func waitForCalls(_ count: Int, timeout: Duration = .seconds(10)) -> Bool {
        waitUntil(timeout: timeout) { self.calls.count >= count }
    }

    var calls: [Call] { entries.withLock { $0 } }
    var shapes: [Shape] { calls.map(\.shape) }
    /// The bytes of every call, concatenated.
    var bytes: [UInt8] { calls.reduce(into: []) { $0.append(contentsOf: $1.data ?? .empty) } }
    var overlaps: Int { overlapCount.load(ordering: .relaxed) }
    var callsOffQueue: Int { calls.filter { !$0.onQueue }.count }
    var isDone: Bool { doneSeen.load(ordering: .acquiring) }
    /// Calls recorded after the first call with `done == true`.
    var callsAfterDone: Int {
        let all = calls
        guard let first = all.firstIndex(where: \.done) else { return 0 }
        return all.count - first - 1
    }

    /// The calls once a little time has passed after `done`, so that an extra
    /// call the library wrongly makes would be seen.
    func settledShapes() -> [Shape] {
        sleepNanoseconds(50_000_000)
        return shapes
    }
}

/// Records a channel's cleanup handler.
final class CleanupRecorder: Sendable {
    let queue: IOQueue?
    private let state = Locked<(calls: Int, error: Errno?, onQueue: Bool)>((0, nil, false))
    private let ran = Latch()
    private let onCall: (@Sendable (Errno?) -> Void)?

    init(queue: IOQueue? = nil, onCall: (@Sendable (Errno?) -> Void)? = nil) {
        self.queue = queue
        self.onCall = onCall
    }

    var handler: @Sendable (Errno?) -> Void {
        { [self] error in
            let onQueue = queue?.isCurrent ?? true
            onCall?(error)
            let first = state.withLock { s -> Bool in
                s.calls += 1
                if s.calls == 1 { s.error = error; s.onQueue = onQueue }
                return s.calls == 1
            }
            if first { ran.signal() }
        }
    }

    func wait(timeout: Duration = .seconds(10)) -> Bool { ran.wait(timeout: timeout) }
    var calls: Int { state.withLock { $0.calls } }
    var hasRun: Bool { calls > 0 }
    var error: Errno? { state.withLock { $0.error } }
    var ranOnQueue: Bool { state.withLock { $0.onQueue } }
}

/// Creates (or truncates) the file at `path` holding `bytes`.
func writeFile(_ path: String, _ bytes: [UInt8]) throws {
    let fd = try FileDescriptor.open(FilePath(path), .writeOnly, options: [.create, .truncate],
                                     permissions: [.ownerReadWrite])
    defer { try? fd.close() }
    _ = try fd.writeAll(bytes)
}

/// The whole content of the file at `path`.
func readFile(_ path: String) throws -> [UInt8] {
    let fd = try FileDescriptor.open(FilePath(path), .readOnly)
    defer { try? fd.close() }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 256 * KiB)
    while true {
        let n = try buffer.withUnsafeMutableBytes { try fd.read(into: $0) }
        if n == 0 { return out }
        out.append(contentsOf: buffer[0..<n])
    }
}

/// Opens `path` (a regular file) for reading and writing.
func openFile(_ path: String, _ mode: FileDescriptor.AccessMode = .readWrite) throws -> FileDescriptor {
    try FileDescriptor.open(FilePath(path), mode, options: [.closeOnExec])
}

/// The fd's file position.
func position(of fd: FileDescriptor) -> Int64 { Int64(lseek(fd.rawValue, 0, SEEK_CUR)) }

/// A pipe: `reader` is the read end, `writer` the write end.
struct TestPipe {
    let reader: FileDescriptor
    let writer: FileDescriptor
    init() throws {
        let ends = try FileDescriptor.pipe()
        reader = ends.readEnd
        writer = ends.writeEnd
    }
    func closeAll() {
        try? reader.close()
        try? writer.close()
    }
}

/// Two connected stream sockets: a socketpair or a TCP connection over 127.0.0.1.
struct TestSockets: Sendable, CustomStringConvertible {
    enum Kind: Sendable, CaseIterable { case socketPair, tcpLoopback }
    let kind: Kind
    /// The end a channel is made on.
    let local: FileDescriptor
    /// The end the test drives with plain system calls.
    let peer: FileDescriptor

    init(_ kind: Kind) throws {
        self.kind = kind
        switch kind {
        case .socketPair:
            var fds: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
                throw Errno(rawValue: errno)
            }
            local = FileDescriptor(rawValue: fds[0])
            peer = FileDescriptor(rawValue: fds[1])
        case .tcpLoopback:
            (local, peer) = try makeTCPLoopbackPair()
        }
    }

    var description: String { "\(kind)" }

    func closeAll() {
        try? local.close()
        try? peer.close()
    }
}

private func loopbackAddress(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return address
}

/// A connected TCP pair over 127.0.0.1 (client, accepted server end).
func makeTCPLoopbackPair() throws -> (FileDescriptor, FileDescriptor) {
    let stream = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
    let listener = socket(AF_INET, stream, 0)
    guard listener >= 0 else { throw Errno(rawValue: errno) }
    defer { close(listener) }
    var address = loopbackAddress(port: 0)
    let size = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, size) }
    }
    guard bound == 0, listen(listener, 1) == 0 else { throw Errno(rawValue: errno) }
    var actual = sockaddr_in()
    var actualSize = size
    let named = withUnsafeMutablePointer(to: &actual) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &actualSize) }
    }
    guard named == 0 else { throw Errno(rawValue: errno) }
    let client = socket(AF_INET, stream, 0)
    guard client >= 0 else { throw Errno(rawValue: errno) }
    var target = loopbackAddress(port: UInt16(bigEndian: actual.sin_port))
    let connected = withUnsafePointer(to: &target) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, size) }
    }
    guard connected == 0 else {
        let e = errno
        close(client)
        throw Errno(rawValue: e)
    }
    let server = accept(listener, nil, nil)
    guard server >= 0 else {
        let e = errno
        close(client)
        throw Errno(rawValue: e)
    }
    return (FileDescriptor(rawValue: client), FileDescriptor(rawValue: server))
}

/// Closes a TCP socket with a reset (SO_LINGER 0), so its peer's read fails with ECONNRESET.
func resetAndClose(_ fd: FileDescriptor) {
    var option = linger(l_onoff: 1, l_linger: 0)
    _ = setsockopt(fd.rawValue, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    _ = close(fd.rawValue)
}

/// Reads whatever `fd` holds right now without blocking.
func drainNonBlocking(_ fd: FileDescriptor) -> [UInt8] {
    let flags = fcntl(fd.rawValue, F_GETFL)
    _ = fcntl(fd.rawValue, F_SETFL, flags | O_NONBLOCK)
    defer { _ = fcntl(fd.rawValue, F_SETFL, flags) }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 64 * KiB)
    while true {
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd.rawValue, $0.baseAddress, $0.count) }
        if n <= 0 { return out }
        out.append(contentsOf: buffer[0..<n])
    }
}

/// An fd number that is closed (and high enough that other tests will not reuse it meanwhile).
func closedDescriptorNumber() throws -> FileDescriptor {
    let fd = try FileDescriptor.open("/dev/null", .readOnly)
    defer { try? fd.close() }
    let high = fcntl(fd.rawValue, F_DUPFD_CLOEXEC, 900)
    guard high >= 0 else { throw Errno(rawValue: errno) }
    close(high)
    return FileDescriptor(rawValue: high)
}

/// A chunk made of `regions` separately allocated pieces of `bytes`, of uneven
/// sizes, joined with `concat`.
func discontiguousChunk(_ bytes: [UInt8], regions: Int) -> DataChunk {
    precondition(regions >= 1 && bytes.count >= regions * 4)
    let step = bytes.count / regions
    var bounds = [0]
    for i in 1..<max(1, regions) {
        let jitter = i % 3 == 0 ? step / 3 : (i % 3 == 1 ? -step / 4 : 0)
        bounds.append(i * step + jitter)
    }
    bounds.append(bytes.count)
    var chunk = DataChunk()
    for r in 0..<regions {
        chunk = chunk.concat(DataChunk(bytes[bounds[r]..<bounds[r + 1]]))
    }
    return chunk
}

/// The fd's file position, read inside a barrier of `channel` (where no operation runs).
func positionInBarrier(of channel: IOChannel, _ fd: FileDescriptor) -> Int64? {
    let seen = Locked<Int64?>(nil)
    let latch = Latch()
    channel.barrier {
        seen.withLock { $0 = position(of: fd) }
        latch.signal()
    }
    guard latch.wait() else { return nil }
    return seen.withLock { $0 }
}
