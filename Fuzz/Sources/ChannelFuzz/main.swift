// A libFuzzer target for IOChannel, through the public API only: the input is
// a program of reads, writes, water marks, barriers and stops on one file,
// through a random path channel or a stream channel on an fd, checked against
// a [UInt8] model of the file. A read must deliver the model's bytes (a
// stopped read a prefix of them); a write's reported unwritten bytes must be
// untouched on disk and its written ones there; the file must equal the model
// after every operation. A difference or a hang stops the process (libFuzzer
// saves the input). Run it with scripts/fuzz.
#if canImport(Glibc)
import Glibc
#endif
import RingIO
import SystemPackage

/// Reads the program's bytes; past the end it yields zeros.
struct Program {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0
    var atEnd: Bool { position >= bytes.count }
    mutating func byte() -> UInt8 {
        defer { position += 1 }
        return position < bytes.count ? bytes[position] : 0
    }
    mutating func int(below bound: Int) -> Int {
        guard bound > 0 else { return 0 }
        let value = Int(byte()) << 8 | Int(byte())
        return value % bound
    }
}

func require(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError("IOChannel differs from its model: \(message())") }
}

/// What one operation's handler calls added up to.
final class Outcome: @unchecked Sendable {
    // @unchecked: written by the operation's handler calls (which never
    // overlap) before `done` is signalled, read after `wait`.
    var data = DataChunk.empty
    var remaining: DataChunk?
    var error: Errno?
    var calls = 0
    var dones = 0
    private let group = IOGroup()
    init() { group.enter() }

    var handler: IOChannel.Handler {
        { [self] done, data, error in
            calls += 1
            if let data { self.data = self.data.concat(data); remaining = data }
            if done {
                dones += 1
                self.error = error
                if dones == 1 { group.leave() }
            }
        }
    }

    func wait(_ what: String) {
        require(group.wait(timeout: .seconds(20)), "\(what) did not end within 20 s (a hang)")
    }
}

let directory: String = {
    var template = Array("/tmp/ringio-channelfuzz-XXXXXX".utf8CString)
    let p = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    precondition(p != nil, "mkdtemp failed")
    return String(cString: p!)
}()
let queue = IOQueue(label: "channelfuzz")

func fileBytes(_ path: String) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    precondition(fd >= 0, "open \(path)")
    defer { close(fd) }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = read(fd, &buffer, buffer.count)
        precondition(n >= 0, "read")
        if n == 0 { return out }
        out += buffer[0..<n]
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var p = Program(bytes: UnsafeBufferPointer(start: data, count: size))
    let path = directory + "/file"
    unlink(path)
    var model: [UInt8] = []
    let stream = p.byte() & 1 == 1
    // A stream channel on an fd (offsets ignored; the position moves), or a
    // random path channel (offsets from the start of the file).
    // One fd for the whole program; a channel is made on it only after the
    // previous one's cleanup ran (the fd is the caller's until then).
    let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    precondition(fd >= 0, "open")
    defer { close(fd) }
    let cleanups = IOGroup()
    func makeChannel() -> IOChannel {
        require(cleanups.wait(timeout: .seconds(20)), "a closed channel's cleanup handler never ran")
        cleanups.enter()
        if stream {
            return IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: fd), queue: queue,
                             cleanup: { _ in cleanups.leave() })
        }
        return try! IOChannel(kind: .random, path: FilePath(path), mode: .readWrite, options: [.create],
                              permissions: [.ownerReadWrite], queue: queue, cleanup: { _ in cleanups.leave() })
    }
    var position = 0  // the stream channel's file position
    var channel = makeChannel()
    var steps = 0
    while !p.atEnd && steps < 24 {
        steps += 1
        let op = p.byte() % 8
        switch op {
        case 0, 1:  // write
            let offset = stream ? position : p.int(below: 80_000)
            let count = 1 + p.int(below: 70_000)
            let seed = p.byte()
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
            let stop = p.byte() % 4 == 0
            let outcome = Outcome()
            channel.write(offset: Int64(offset), data: DataChunk(bytes), queue: queue, handler: outcome.handler)
            if stop { channel.close(stop: true) }
            outcome.wait("write of \(count) at \(offset)")
            let unwritten = outcome.error == nil ? 0 : (outcome.remaining?.count ?? count)
            require(outcome.error == nil || outcome.error == .canceled, "write error \(String(describing: outcome.error))")
            let written = count - unwritten
            let onDisk = fileBytes(path)
            // The written prefix is there; the unwritten rest is untouched.
            if written > 0 {
                if model.count < offset + written {
                    model += [UInt8](repeating: 0, count: offset + written - model.count)
                }
                model.replaceSubrange(offset..<(offset + written), with: bytes[0..<written])
            }
            require(onDisk == model, "after a write of \(count) at \(offset) (\(written) reported written): "
                    + "file \(onDisk.count) bytes, model \(model.count)")
            if stream { position += written }
            if stop { channel = makeChannel() }
        case 2, 3:  // read
            let offset = stream ? position : p.int(below: 90_000)
            let length = 1 + p.int(below: 90_000)
            let stop = p.byte() % 4 == 0
            let outcome = Outcome()
            channel.read(offset: Int64(offset), length: length, queue: queue, handler: outcome.handler)
            if stop { channel.close(stop: true) }
            outcome.wait("read of \(length) at \(offset)")
            let expected = offset >= model.count ? [] : Array(model[offset..<min(model.count, offset + length)])
            let got = Array(outcome.data)
            if outcome.error == nil {
                require(got == expected, "read of \(length) at \(offset): \(got.count) bytes, model \(expected.count)")
            } else {
                require(stop && outcome.error == .canceled, "read error \(String(describing: outcome.error))")
                require(got.count <= expected.count && got == Array(expected[0..<got.count]),
                        "a stopped read delivered bytes that are not the file's")
            }
            require(outcome.dones == 1, "read ended \(outcome.dones) times")
            if stream { position += got.count }
            if stop {
                // The stream position moved by what the kernel read, delivered or not.
                if stream { position = Int(lseek(fd, 0, SEEK_CUR)) }
                require(position >= 0, "lseek")
                channel = makeChannel()
            }
        case 4:  // water marks
            let value = 1 + p.int(below: 20_000)
            if p.byte() & 1 == 0 { channel.setHighWater(value) } else { channel.setLowWater(value) }
        case 5:  // barrier
            let group = IOGroup()
            group.enter()
            channel.barrier { group.leave() }
            require(group.wait(timeout: .seconds(20)), "a barrier never ran")
        case 6:  // interval
            channel.setInterval(.milliseconds(1 + p.int(below: 5)), strict: p.byte() & 1 == 0)
        default:  // a new channel (close without stop)
            channel.close()
            channel = makeChannel()
        }
    }
    channel.close()
    require(cleanups.wait(timeout: .seconds(20)), "the last channel's cleanup handler never ran")
    require(fileBytes(path) == model, "the file differs from the model at the end")
    return 0
}

// SwiftPM links an executable target with `main` defined as `<target>_main`,
// so libFuzzer's own `main` is not used: start its driver from here.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

@_cdecl("ChannelFuzz_main")
func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzz(data, size) }
}
