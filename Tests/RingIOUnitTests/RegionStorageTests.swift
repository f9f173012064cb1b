import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOData
@testable import RingIOEngine

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
}
