// ringio-demo: writes a generated file through the engine, reads it back,
// checks every byte and prints the throughput of both directions.
//
//     swift run -c release ringio-demo [--size MiB] [--dir DIRECTORY] [--in-flight N]
//
// It uses the engine's raw request interface (SPI); `ringcp` will replace it
// as the main job once the channels exist.
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
@_spi(Engine) import RingIO

struct Options {
    var sizeMiB = 256
    var directory = "/tmp"
    var inFlight = 32
    let chunk = 1 << 20

    init(_ arguments: [String]) throws {
        var i = 0
        func value() throws -> String {
            i += 1
            guard i < arguments.count else { throw DemoError("missing value after \(arguments[i - 1])") }
            return arguments[i]
        }
        while i < arguments.count {
            switch arguments[i] {
            case "--size": sizeMiB = try Int(value()).filter { $0 > 0 } ?? { throw DemoError("--size takes a positive number of MiB") }()
            case "--dir": directory = try value()
            case "--in-flight": inFlight = try Int(value()).filter { $0 > 0 } ?? { throw DemoError("--in-flight takes a positive number") }()
            case "-h", "--help":
                print("usage: ringio-demo [--size MiB (256)] [--dir DIRECTORY (/tmp)] [--in-flight N (32)]")
                exit(0)
            default: throw DemoError("unknown argument '\(arguments[i])' (try --help)")
            }
            i += 1
        }
    }
}

struct DemoError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

extension Optional {
    func filter(_ p: (Wrapped) -> Bool) -> Wrapped? { flatMap { p($0) ? $0 : nil } }
}

/// A page-aligned buffer that lives as long as a request needs it.
final class Buffer: @unchecked Sendable {
    // @unchecked: one request at a time writes or reads the bytes; the
    // completion handoff through the queue orders the accesses.
    let bytes: UnsafeMutableRawBufferPointer
    init(count: Int) { bytes = .allocate(byteCount: count, alignment: 4096) }
    deinit { bytes.deallocate() }
}

/// Seeded random bytes shared by every chunk (xorshift).
enum Template {
    nonisolated(unsafe) static let bytes: UnsafeMutableRawBufferPointer = {
    let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
    var x: UInt64 = 0x9E37_79B9_7F4A_7C15
    let words = bytes.bindMemory(to: UInt64.self)
    for i in words.indices {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17
        words[i] = x
    }
    return bytes
    }()
}

/// Deterministic content for chunk `index`: the template with the chunk and
/// page number stamped into each 4 KiB page, so that a misplaced page shows.
func fill(_ buffer: UnsafeMutableRawBufferPointer, chunk index: Int) {
    buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: Template.bytes[0..<buffer.count]))
    for page in stride(from: 0, to: buffer.count, by: 4096) {
        buffer.storeBytes(of: UInt64(index) << 20 | UInt64(page >> 12), toByteOffset: page, as: UInt64.self)
    }
}

/// `value` with `digits` decimals (the demo does not import Foundation).
func fixed(_ value: Double, _ digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = Int((value * scale).rounded())
    let whole = scaled / Int(scale), frac = scaled % Int(scale)
    let f = String(frac)
    return "\(whole)." + String(repeating: "0", count: digits - f.count) + f
}

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Runs `count` chunk requests with at most `inFlight` outstanding; `make`
/// builds the request for a chunk, `check` validates a completed one on `queue`.
func pump(engine: IOEngine, queue: IOQueue, count: Int, inFlight: Int,
          make: @escaping @Sendable (Int, @escaping @Sendable (Int32) -> Void) -> IORequest,
          check: @escaping @Sendable (Int, Int32) -> String?) throws {
    // @unchecked: touched only from items of the serial `queue` (and before the first one is submitted).
    final class State: @unchecked Sendable {
        var next = 0
        var finished = 0
        var failure: String?
    }
    let state = State()
    let group = IOGroup()
    group.enter()
    @Sendable func launch(_ index: Int) {
        engine.submit(make(index) { res in
            queue.async {
                if let problem = check(index, res), state.failure == nil { state.failure = problem }
                state.finished += 1
                if state.next < count && state.failure == nil {
                    let n = state.next
                    state.next += 1
                    launch(n)
                } else if state.finished == state.next {
                    group.leave()
                }
            }
        })
    }
    queue.sync {
        let first = min(inFlight, count)
        state.next = first
        for i in 0..<first { launch(i) }
    }
    group.wait()
    if let failure = queue.sync({ state.failure }) { throw DemoError(failure) }
}

func run() throws {
    let options = try Options(Array(CommandLine.arguments.dropFirst()))
    let engine = IOEngine.shared
    let queue = IOQueue(label: "demo")
    let chunks = options.sizeMiB * (1 << 20) / options.chunk
    let path = options.directory + "/ringio-demo-\(getpid()).bin"
    let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw DemoError("cannot create '\(path)': \(Errno(rawValue: errno))") }
    defer { close(fd); unlink(path) }

    print("RingIO demo: \(options.sizeMiB) MiB in \(options.chunk >> 10) KiB requests, \(options.inFlight) in flight, backend: \(engine.backend)")
    if let reason = engine.fallbackReason { print("  (fallback: \(reason))") }

    // Write.
    let chunk = options.chunk
    let t0 = now()
    try pump(engine: engine, queue: queue, count: chunks, inFlight: options.inFlight, make: { index, done in
        let buffer = Buffer(count: chunk)
        fill(buffer.bytes, chunk: index)
        return IORequest(.write(fd: fd, buffer: UnsafeRawBufferPointer(buffer.bytes), offset: Int64(index * chunk)), owner: buffer, completion: done)
    }, check: { index, res in
        res == Int32(chunk) ? nil : "write of chunk \(index) returned \(res < 0 ? "\(Errno(rawValue: -res))" : "\(res) bytes")"
    })
    guard fsync(fd) == 0 else { throw DemoError("fsync: \(Errno(rawValue: errno))") }
    let t1 = now()

    // Read back and verify.
    let expected = Buffer(count: chunk)
    let buffers = Mutex<[Int: Buffer]>([:])
    try pump(engine: engine, queue: queue, count: chunks, inFlight: options.inFlight, make: { index, done in
        let buffer = Buffer(count: chunk)
        buffers.withLock { $0[index] = buffer }
        return IORequest(.read(fd: fd, buffer: buffer.bytes, offset: Int64(index * chunk)), owner: buffer, completion: done)
    }, check: { index, res in
        // Runs on the demo's queue, not on the ring thread.
        guard res == Int32(chunk) else { return "read of chunk \(index) returned \(res)" }
        let buffer = buffers.withLock { $0.removeValue(forKey: index)! }
        fill(expected.bytes, chunk: index)
        return memcmp(expected.bytes.baseAddress!, buffer.bytes.baseAddress!, chunk) == 0 ? nil : "chunk \(index) read back with different bytes"
    })
    let t2 = now()

    let gib = Double(chunks * chunk) / Double(1 << 30)
    print("  write + fsync: \(fixed(gib / (t1 - t0), 2)) GiB/s (\(fixed(t1 - t0, 3)) s)")
    print("  read + verify: \(fixed(gib / (t2 - t1), 2)) GiB/s (\(fixed(t2 - t1, 3)) s, page cache warm)")
    print("  all \(chunks) chunks verified")
}

do {
    try run()
} catch {
    var line = Array("ringio-demo: \(error)\n".utf8)
    _ = write(2, &line, line.count)
    exit(1)
}
