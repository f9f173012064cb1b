#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Synchronization
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

/// A read whose handler passes each chunk on to `target.write` (the README's
/// handler copy) pauses while those chunks wait unwritten: the copy holds
/// at most the read's buffer limit in buffers, however large the file.
@Suite("Read-ahead held by queued writes")
struct ReadAheadHoldTests {
    @Test("a handler copy into a pipe nobody reads yet stops reading at the buffer limit, then copies every byte",
          arguments: allBackends)
    func copyIntoStalledPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let size = 48 * MiB
        let bytes = randomBytes(size, seed: 7)
        let setup = try FileDescriptor.open(FilePath(dir.file("src")), .writeOnly, options: [.create, .truncate],
                                            permissions: [.ownerReadWrite])
        _ = try setup.writeAll(bytes)
        try setup.close()
        let ends = try FileDescriptor.pipe()
        let queue = IOQueue(label: "hold-copy")
        let source = try IOChannel(kind: .stream, path: FilePath(dir.file("src")), mode: .readOnly, queue: queue,
                                   engine: engine)
        let target = IOChannel(kind: .stream, fileDescriptor: ends.writeEnd, queue: queue, engine: engine) { _ in
            try? ends.writeEnd.close()
        }
        let delivered = Atomic<Int>(0)
        let copied = Latch()
        source.read(length: .max, queue: queue) { done, data, error in
            if let data, !data.isEmpty {
                delivered.add(data.count, ordering: .relaxed)
                target.write(data: data, queue: queue) { _, _, _ in }
            }
            #expect(error == nil)
            if done { target.barrier { source.close(); target.close(); copied.signal() } }
        }
        // Nobody reads the pipe: its 64 KiB fill, and the writes queue up.
        sleepNanoseconds(400_000_000)
        let early = delivered.load(ordering: .relaxed)
        let limit = ChannelOperation.maxBufferedBytes
        #expect(early <= limit + 2 * IOChannel.chunkSize,
                "the read handed out \(early >> 20) MiB while its chunks waited in the pipe's write queue")
        #expect(early >= IOChannel.chunkSize)
        // Drain the pipe: the copy goes on to the end, every byte in order.
        var out = [UInt8]()
        out.reserveCapacity(size)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = try ends.readEnd.read(into: buffer)
            if n == 0 { break }
            out.append(contentsOf: buffer[0..<n])
        }
        try ends.readEnd.close()
        #expect(copied.wait())
        #expect(out.count == size)
        let same = out == bytes
        #expect(same, "the pipe got the file's bytes in order")
    }

    @Test("a read handler writing back to the file it reads does not wait for itself", arguments: allBackends)
    func writeBehindOwnRead(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let size = 24 * MiB
        let bytes = randomBytes(size, seed: 9)
        let fd = try FileDescriptor.open(FilePath(dir.file("f")), .readWrite, options: [.create, .truncate],
                                         permissions: [.ownerReadWrite])
        defer { try? fd.close() }
        _ = try fd.writeAll(bytes)
        _ = try fd.seek(offset: 0, from: .start)
        let queue = IOQueue(label: "hold-self")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let appended = Atomic<Int>(0)
        let finished = Latch()
        // Each chunk is queued as a stream write behind the read (one lane
        // on a regular file): it runs only once the whole read is over.
        channel.read(length: size, queue: queue) { done, data, error in
            if let data, !data.isEmpty {
                channel.write(data: data, queue: queue) { done, _, error in
                    #expect(error == nil)
                    if done { appended.add(1, ordering: .relaxed) }
                }
            }
            #expect(error == nil)
            if done { channel.barrier { finished.signal() } }
        }
        #expect(finished.wait())
        channel.close()
        let onDisk = try readFile(dir.file("f"))
        #expect(onDisk.count == 2 * size)
        let same = onDisk == bytes + bytes
        #expect(same)
    }
}
