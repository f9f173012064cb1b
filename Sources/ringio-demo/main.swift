// ringio-demo: writes a generated file with IO.writeFile, copies it with
// IO.copyFile, reads the copy back through a channel's chunks, checks every
// byte and prints the throughput of each step.
//
//     swift run -c release ringio-demo [--size MiB] [--dir DIRECTORY]
#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import RingIO

struct Options {
    var sizeMiB = 256
    var directory = "/tmp"
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
            case "-h", "--help":
                print("usage: ringio-demo [--size MiB (256)] [--dir DIRECTORY (/tmp)]")
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

/// A generated chunk of `sizeMiB` MiB: one 1 MiB region per chunk, each
/// filled by `fill`, joined with `concat` (no copy).
func generate(sizeMiB: Int, chunk: Int) -> DataChunk {
    var data = DataChunk.empty
    for index in 0..<sizeMiB * (1 << 20) / chunk {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 4096)
        fill(buffer, chunk: index)
        data = data + DataChunk(bytesNoCopy: UnsafeRawBufferPointer(buffer), deallocator: .free)
    }
    return data
}

func run() async throws {
    let options = try Options(Array(CommandLine.arguments.dropFirst()))
    let engine = IOEngine.shared
    let chunk = options.chunk
    let source = FilePath(options.directory + "/ringio-demo-\(getpid()).bin")
    let copy = FilePath(options.directory + "/ringio-demo-\(getpid()).copy")
    guard source.isAbsolute else { throw DemoError("--dir must be an absolute path") }
    defer {
        unlink(source.string)
        unlink(copy.string)
    }
    print("RingIO demo: \(options.sizeMiB) MiB, backend: \(engine.backend)")
    if let reason = engine.fallbackReason { print("  (fallback: \(reason))") }

    // 1. Write a generated file: IO.writeFile writes the chunk's regions with
    //    vectored writes (no flattening copy), fsyncs a temporary file and
    //    renames it into place.
    let data = generate(sizeMiB: options.sizeMiB, chunk: chunk)
    let t0 = now()
    try await IO.writeFile(data, to: source, engine: engine)
    let t1 = now()

    // 2. Copy it: a stream read channel's chunks, at most two read ahead,
    //    each written by a stream write channel.
    try await IO.copyFile(from: source, to: copy, engine: engine)
    let t2 = now()

    // 3. Read the copy back chunk by chunk and check every byte.
    let reader = try IOChannel(kind: .stream, path: copy, mode: .readOnly, queue: IOQueue(label: "demo"), engine: engine)
    defer { reader.close() }
    let expected = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 4096)
    defer { expected.deallocate() }
    var index = 0
    var total = 0
    for try await piece in reader.chunks() {
        guard piece.count == chunk else { throw DemoError("chunk \(index) came back with \(piece.count) bytes") }
        fill(expected, chunk: index)
        let same = piece.withUnsafeBytes { memcmp($0.baseAddress!, expected.baseAddress!, chunk) == 0 }
        guard same else { throw DemoError("chunk \(index) of the copy differs from what was written") }
        index += 1
        total += piece.count
    }
    let t3 = now()
    guard total == data.count else { throw DemoError("read back \(total) of \(data.count) bytes") }

    let gib = Double(data.count) / Double(1 << 30)
    print("  write (IO.writeFile, fsync + rename): \(fixed(gib / (t1 - t0), 2)) GiB/s (\(fixed(t1 - t0, 3)) s)")
    print("  copy (IO.copyFile):                   \(fixed(gib / (t2 - t1), 2)) GiB/s (\(fixed(t2 - t1, 3)) s)")
    print("  read back + verify (chunks()):        \(fixed(gib / (t3 - t2), 2)) GiB/s (\(fixed(t3 - t2, 3)) s)")
    print("  all \(index) chunks verified")
}

do {
    try await run()
} catch {
    var line = Array("ringio-demo: \(error)\n".utf8)
    _ = write(2, &line, line.count)
    exit(1)
}
