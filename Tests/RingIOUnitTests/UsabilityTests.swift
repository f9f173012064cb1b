import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase

@Suite("DataChunk: slicing, appending, literals")
struct DataChunkBuildingTests {
    @Test func sliceIsAChunkWithoutCopying() throws {
        let bytes = randomBytes(1000, seed: 191)
        withEveryLayout(of: bytes, seed: 191) { label, chunk in
            let middle: DataChunk = chunk[100..<900]
            #expect(Array(middle) == Array(bytes[100..<900]), "\(label)")
            #expect(middle.startIndex == 0, "\(label)")
            let tail: DataChunk = chunk[990...]
            #expect(Array(tail) == Array(bytes[990...]), "\(label)")
            let head: DataChunk = chunk[..<3]
            #expect(Array(head) == Array(bytes[..<3]), "\(label)")
            let closed: DataChunk = chunk[10...19]
            #expect(Array(closed) == Array(bytes[10...19]), "\(label)")
            #expect(chunk[...] == chunk, "\(label)")
            #expect(chunk[5..<5].isEmpty, "\(label)")
            // Generic code still gets a Slice with the base's indices.
            let generic = chunk.dropFirst(10)
            #expect(generic.startIndex == 10 && generic.first == bytes[10], "\(label)")
        }
        // No copy: the slice of a no-copy chunk points into the caller's buffer.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 1)
        defer { buffer.deallocate() }
        buffer.copyBytes(from: 0..<64)
        let chunk = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(buffer), deallocator: .none)
        chunk[16..<32].withUnsafeBytes { #expect($0.baseAddress == UnsafeRawPointer(buffer.baseAddress! + 16)) }
    }

    @Test func appendAndLiterals() {
        var chunk: DataChunk = [1, 2, 3]
        #expect(Array(chunk) == [1, 2, 3])
        chunk += [4, 5]
        chunk.append(contentsOf: DataChunk([6]))
        chunk.append(contentsOf: .empty)
        #expect(Array(chunk) == [1, 2, 3, 4, 5, 6])
        #expect(chunk.regionCount == 3)
        let empty: DataChunk = []
        #expect(empty == .empty && empty.regionCount == 0)
        var many = DataChunk.empty
        for i in 0..<1000 { many += [UInt8(truncatingIfNeeded: i)] }
        #expect(many.count == 1000 && many.regionCount == 1000)
        #expect(Array(many) == (0..<1000).map { UInt8(truncatingIfNeeded: $0) })
    }

    @Test func contiguousAndItsAlias() {
        let bytes = randomBytes(300, seed: 192)
        withEveryLayout(of: bytes, seed: 192) { label, chunk in
            let flat = chunk.contiguous()
            #expect(flat.regionCount <= 1 && Array(flat) == bytes, "\(label)")
            #expect(chunk.map() == flat && chunk.map().regionCount == flat.regionCount, "\(label)")
        }
        let one = DataChunk(bytes)
        one.withUnsafeBytes { a in one.contiguous().withUnsafeBytes { b in #expect(a.baseAddress == b.baseAddress) } }
    }
}

@Suite("IOGroup: await wait()")
struct IOGroupAsyncTests {
    @Test func returnsAtOnceWhenEmpty() async {
        await IOGroup().wait()
    }

    @Test func waitsForHandlersOnAQueue() async {
        let group = IOGroup()
        let done = Locked(0)
        let queue = IOQueue(label: "group-async", kind: .concurrent)
        for _ in 0..<8 {
            group.enter()
            queue.async {
                milliseconds(5)
                done.withLock { $0 += 1 }
                group.leave()
            }
        }
        await group.wait()
        #expect(done.withLock { $0 } == 8)
    }

    /// More waiting tasks than cooperative threads, and the leave comes from
    /// another task: a wait that blocked its thread would never let it run.
    @Test func doesNotHoldACooperativeThread() async {
        let group = IOGroup()
        group.enter()
        await withTaskGroup(of: Void.self) { tasks in
            for _ in 0..<32 { tasks.addTask { await group.wait() } }
            tasks.addTask {
                await Task.yield()
                group.leave()
            }
        }
        await group.wait()
    }
}
