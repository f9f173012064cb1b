import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOData
@testable import RingIOEngine
@testable import RingIOBase

/// The engine's read buffers as `DataChunk` storage: a `RegionStorage` of
/// their own (not a subclass of `DataChunk.Storage`), which carries the
/// buffer's registered index to the writer without a cast, and gives the
/// buffer back to its pool when the last region goes.
@Suite("RegionStorage: read buffers as chunk storage")
struct RegionStorageTests {
    @Test("a chunk of a registered pool buffer carries its registration; copies and multi-region chunks do not")
    func registrationTravelsWithTheRegion() throws {
        let size = 1 << 20
        let pool = BufferPool(bufferSize: size, maximumIdle: 2, permanent: 1)
        var buffer: ReadBuffer? = ReadBuffer(capacity: size, pool: pool)
        let registered = try #require(buffer!.registered, "the pool's first buffer is permanent")
        #expect(registered.index == 0 && registered.base == buffer!.pointer && registered.length == size)
        let pointer = buffer!.pointer

        var whole: DataChunk? = buffer!.chunk(count: size)
        #expect(whole!.soleStorage?.registered?.index == 0)
        #expect(whole!.soleStorage === buffer!, "the read buffer itself is the chunk's storage (no second object)")
        // A one-region subrange still names the buffer; a join of two does not.
        var part: DataChunk? = whole![1000..<300_000]
        #expect(part!.soleStorage?.registered?.index == 0)
        #expect((part! + DataChunk([1, 2, 3])).soleStorage == nil)
        // A small part of a pool buffer is copied out: not registered.
        #expect(buffer!.chunk(range: 0..<100).soleStorage?.registered == nil)
        // An ordinary chunk's storage has no registration.
        #expect(DataChunk([1, 2, 3]).soleStorage?.registered == nil)

        // The buffer goes back to its pool only when the last region is gone.
        buffer = nil
        whole = nil
        let other = pool.take()
        #expect(other.1 == -1, "a permanent buffer was handed out while a region still referred to it")
        pool.give(other.0, slot: other.1)
        part = nil
        let again = pool.take()
        #expect(again.0 == pointer && again.1 == 0)
        pool.give(again.0, slot: again.1)
    }

    @Test("the shared pool's buffers are the channels' request size")
    func sharedPoolSize() {
        #expect(BufferPool.shared.bufferSize == IOChannel.chunkSize)
        #expect(BufferPool.registrableCount == 32)
    }

    @Test("a small read's chunk owns its 4 KiB block: one leaf, its slices keep the bytes, the block comes back last")
    func smallBlockLeaf() throws {
        let pattern = { (i: Int) in UInt8(truncatingIfNeeded: i &* 7 &+ 3) }
        let block = SmallBlocks.take()
        for i in 0..<SmallBlocks.size { block.storeBytes(of: pattern(i), toByteOffset: i, as: UInt8.self) }
        var chunk: DataChunk? = DataChunk(smallBlock: block, count: 3000)
        #expect(chunk!.count == 3000 && chunk!.regionCount == 1)
        #expect(chunk!.root!.checkInvariants())
        #expect(chunk!.soleStorage?.registered == nil)
        chunk!.withUnsafeBytes { #expect($0.baseAddress == UnsafeRawPointer(block), "the chunk's bytes are the block (no copy)") }
        var slice: DataChunk? = chunk![1000..<2000]
        var joined: DataChunk? = DataChunk([1, 2, 3]) + slice!
        #expect(joined!.root!.checkInvariants() && joined!.regionCount == 2)
        chunk = nil
        // The block still backs the slice and the join.
        #expect(Array(slice!) == (1000..<2000).map(pattern))
        #expect(Array(joined!) == [1, 2, 3] + (1000..<2000).map(pattern))
        slice = nil
        #expect(Array(joined!.subrange(3..<1003)) == (1000..<2000).map(pattern))
        joined = nil
        // The last region is gone: the block is back in this thread's cache,
        // the first one handed out again.
        let again = SmallBlocks.take()
        #expect(again == block)
        // An empty read gives the block back at once.
        #expect(DataChunk(smallBlock: again, count: 0).isEmpty)
        let third = SmallBlocks.take()
        #expect(third == block)
        SmallBlocks.give(third)
    }

    @Test("a small read reuses the thread's last leaf only once no chunk or slice holds it; fewer bytes are a copy")
    func smallReadReuse() throws {
        // (Synchronous: the whole test runs on one thread, whose slot it uses.)
        func expected(_ seed: UInt8, _ count: Int = 4096) -> [UInt8] {
            (0..<count).map { seed &+ UInt8(truncatingIfNeeded: $0) }
        }
        /// One read of `length` bytes, `count` of them "read" (the pattern of
        /// `seed`): its chunk and the memory it was read into.
        func read(_ seed: UInt8, length: Int = 4096, count: Int? = nil) -> (DataChunk, UnsafeMutableRawPointer) {
            let small = DataChunk.SmallRead(length: length)
            for i in 0..<(count ?? length) {
                small.pointer.storeBytes(of: seed &+ UInt8(truncatingIfNeeded: i), toByteOffset: i, as: UInt8.self)
            }
            return (small.chunk(count: count ?? length), small.pointer)
        }
        var (c1, p1): (DataChunk?, UnsafeMutableRawPointer) = read(1)
        // c1 is held: the next read gets other memory, and c1 keeps its bytes.
        var (c2, p2): (DataChunk?, UnsafeMutableRawPointer) = read(2)
        #expect(p2 != p1)
        #expect(Array(c1!) == expected(1) && Array(c2!) == expected(2))
        c1 = nil
        c2 = nil
        // Both gone: the last leaf (c2's) is filled again, in place.
        var (c3, p3): (DataChunk?, UnsafeMutableRawPointer) = read(3)
        #expect(p3 == p2)
        #expect(Array(c3!) == expected(3))
        // A slice keeps the leaf: not reused, the slice's bytes stay.
        let slice = c3![100..<200]
        c3 = nil
        let (_, p4) = read(4)
        #expect(p4 != p3)
        #expect(Array(slice) == Array(expected(3)[100..<200]))
        // Another length: right bytes.
        #expect(Array(read(5, length: 100).0) == expected(5, 100))
        // Fewer bytes than asked into a reused leaf (the end of a file): a
        // copy of them, and the leaf stays for the next read.
        let (_, p6) = read(6)
        let (_, p7) = read(7)
        #expect(p7 == p6)
        let (short, p8) = read(8, count: 100)
        #expect(p8 == p6)
        short.withUnsafeBytes { #expect($0.baseAddress != UnsafeRawPointer(p8), "a copy") }
        #expect(Array(short) == expected(8, 100))
        let (empty, p9) = read(9, count: 0)
        #expect(p9 == p6 && empty.isEmpty)
        #expect(Array(short) == expected(8, 100))
        // Nothing read: the leaf goes back untouched.
        let small = DataChunk.SmallRead(length: 4096)
        #expect(small.pointer == p6)
        small.giveBack()
    }

    @Test("blocks given back on another thread are that thread's; more than it keeps go to the shared ones or free")
    func smallBlocksAcrossThreads() throws {
        // 40 blocks taken here, their chunks dropped on another thread that
        // then ends (its cache is freed): nothing traps, nothing is reused twice.
        var chunks: [DataChunk] = []
        var seen = Set<UnsafeMutableRawPointer>()
        for i in 0..<40 {
            let block = SmallBlocks.take()
            #expect(seen.insert(block).inserted, "a block was handed out twice")
            block.storeBytes(of: UInt8(i), as: UInt8.self)
            chunks.append(DataChunk(smallBlock: block, count: 1))
        }
        let box = Locked(chunks)
        chunks = []
        let done = Latch()
        let intact = Locked(false)
        let rc = spawnThread(name: "ringio-test-blocks") {
            let held = box.withLock { held in
                defer { held = [] }
                return held
            }
            let ok = held.count == 40 && held.enumerated().allSatisfy { $0.element.first == UInt8($0.offset) }
            intact.withLock { $0 = ok }
            done.signal()
        }
        #expect(rc == 0)
        #expect(done.wait(timeout: .seconds(300)))
        #expect(intact.withLock { $0 }, "the chunks' bytes were not intact on the other thread")
        #expect(box.withLock { $0.isEmpty })
    }
}
