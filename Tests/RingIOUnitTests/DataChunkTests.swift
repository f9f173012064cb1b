#if canImport(Glibc)
import Glibc
#endif
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOData
@testable import RingIOBase

/// Every way of laying out `bytes` in regions that the tests check alike
/// (the swift-collections `withEvery...` idea).
func withEveryLayout(of bytes: [UInt8], seed: UInt64 = 1, _ body: (String, DataChunk) throws -> Void) rethrows {
    var rng = SeededGenerator(seed: seed)
    try body("one region", DataChunk(bytes))
    if bytes.isEmpty {
        try body("empty literal", .empty)
        return
    }
    // One region per byte, appended left to right and prepended right to left.
    try body("byte regions, appended", bytes.reduce(DataChunk.empty) { $0 + DataChunk([$1]) })
    try body("byte regions, prepended", bytes.reversed().reduce(DataChunk.empty) { DataChunk([$1]) + $0 })
    // Random cuts, three different seeds.
    for round in 0..<3 {
        var chunk = DataChunk.empty
        var i = 0
        while i < bytes.count {
            let n = Int.random(in: 1...max(1, min(bytes.count - i, 1 + bytes.count / (round + 2))), using: &rng)
            chunk = chunk + DataChunk(bytes[i..<(i + n)])
            i += n
        }
        try body("random cuts \(round)", chunk)
    }
    // A subrange of a larger chunk: regions that start and end inside storages.
    let padded = DataChunk([1, 2, 3]) + DataChunk(bytes) + DataChunk([4, 5])
    try body("inside a larger chunk", padded.subrange(3..<(3 + bytes.count)))
    // Built by concatenating halves (a different tree shape).
    func halves(_ slice: ArraySlice<UInt8>) -> DataChunk {
        slice.count <= 2 ? DataChunk(slice) : halves(slice.prefix(slice.count / 2)) + halves(slice.dropFirst(slice.count / 2))
    }
    try body("halves", halves(bytes[...]))
}

/// Checks every read-only operation of `chunk` against `model`.
func checkAgainstModel(_ chunk: DataChunk, _ model: [UInt8], _ label: String, rng: inout SeededGenerator) {
    #expect(chunk.count == model.count, "\(label): count")
    #expect(Array(chunk) == model, "\(label): iteration")
    #expect(chunk.root?.checkInvariants() ?? true, "\(label): tree invariants")
    #expect((chunk.regionCount == 0) == model.isEmpty, "\(label): regionCount of empty")
    if chunk.regionCount > 0 {
        // A balanced tree: height at most 1.45 log2(regions) + 2.
        let bound = 1.45 * log2(Double(chunk.regionCount)) + 2
        #expect(Double(chunk.root!.height) <= bound, "\(label): height \(chunk.root!.height) for \(chunk.regionCount) regions")
    }
    // apply: in order, offsets right, bytes right, and early stop.
    var seen: [UInt8] = []
    var regions = 0
    let completed = chunk.apply { region, offset, bytes in
        #expect(offset == seen.count, "\(label): apply offset")
        #expect(region.count == bytes.count && region.regionCount == 1)
        seen.append(contentsOf: bytes)
        regions += 1
        return true
    }
    #expect(completed && seen == model && regions == chunk.regionCount, "\(label): apply")
    if chunk.regionCount > 1 {
        var calls = 0
        let stopped = chunk.apply { _, _, _ in calls += 1; return false }
        #expect(!stopped && calls == 1, "\(label): apply stops early")
    }
    // map and withUnsafeBytes.
    let mapped = chunk.map()
    #expect(mapped.regionCount <= 1 && Array(mapped) == model, "\(label): map")
    if chunk.regionCount <= 1 { #expect(mapped.root === chunk.root, "\(label): map of a contiguous chunk must not copy") }
    chunk.withUnsafeBytes { #expect(Array($0) == model, "\(label): withUnsafeBytes") }
    // Equality and hashing by content.
    let flat = DataChunk(model)
    #expect(chunk == flat && chunk.hashValue == flat.hashValue, "\(label): equality and hash by content")
    if !model.isEmpty {
        var other = model
        let i = Int.random(in: 0..<model.count, using: &rng)
        other[i] &+= 1
        #expect(chunk != DataChunk(other), "\(label): a changed byte is unequal")
        // region(containing:) and the subscript at a few places.
        for _ in 0..<4 {
            let location = Int.random(in: 0..<model.count, using: &rng)
            let (region, start) = chunk.region(containing: location)
            #expect(start <= location && location < start + region.count, "\(label): region(containing:) range")
            #expect(Array(region) == Array(model[start..<(start + region.count)]), "\(label): region bytes")
            #expect(chunk[location] == model[location], "\(label): subscript")
        }
    }
    // copyBytes with a random range and a destination that may be short.
    let lo = Int.random(in: 0...model.count, using: &rng)
    let hi = Int.random(in: lo...model.count, using: &rng)
    let room = Int.random(in: 0...(hi - lo + 2), using: &rng)
    var destination = [UInt8](repeating: 0xEE, count: room)
    let copied = destination.withUnsafeMutableBytes { chunk.copyBytes(to: $0, from: lo..<hi) }
    #expect(copied == min(room, hi - lo), "\(label): copyBytes count")
    #expect(Array(destination.prefix(copied)) == Array(model[lo..<(lo + copied)]), "\(label): copyBytes bytes")
    #expect(destination.dropFirst(copied).allSatisfy { $0 == 0xEE }, "\(label): copyBytes wrote past its count")
}

@Suite("DataChunk")
struct DataChunkTests {
    @Test("every operation matches a [UInt8] model over every layout", arguments: [0, 1, 2, 7, 64, 300])
    func layouts(size: Int) {
        var rng = SeededGenerator(seed: UInt64(size) + 11)
        let bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &rng) }
        withEveryLayout(of: bytes, seed: UInt64(size)) { label, chunk in
            checkAgainstModel(chunk, bytes, "\(size) bytes, \(label)", rng: &rng)
            // Subranges at both ends and in the middle, zero-length included.
            for range in [0..<0, size..<size, 0..<size, (size / 3)..<(size - size / 3)] {
                checkAgainstModel(chunk.subrange(range), Array(bytes[range]), "\(label) subrange \(range)", rng: &rng)
            }
        }
    }

    @Test("random sequences of concat, subrange and map match the model", arguments: [1 as UInt64, 2, 3, 4])
    func randomSequences(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        var pool: [(DataChunk, [UInt8])] = [(.empty, [])]
        for _ in 0..<6 {
            let n = Int.random(in: 0...40, using: &rng)
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            pool.append((DataChunk(bytes), bytes))
        }
        for step in 0..<400 {
            let (a, ma) = pool.randomElement(using: &rng)!
            let result: (DataChunk, [UInt8])
            switch Int.random(in: 0..<10, using: &rng) {
            case 0..<4:
                let (b, mb) = pool.randomElement(using: &rng)!
                result = (a + b, ma + mb)
            case 4..<8:
                let lo = Int.random(in: 0...ma.count, using: &rng)
                let hi = Int.random(in: lo...ma.count, using: &rng)
                result = (a.subrange(lo..<hi), Array(ma[lo..<hi]))
            default:
                result = (a.map(), ma)
            }
            checkAgainstModel(result.0, result.1, "seed \(seed) step \(step)", rng: &rng)
            if result.1.count < 5000 { pool.append(result) }
            if pool.count > 40 { pool.remove(at: Int.random(in: 0..<pool.count, using: &rng)) }
        }
    }

    @Test("empty chunks everywhere")
    func empties() {
        let e = DataChunk.empty
        #expect(e.count == 0 && e.regionCount == 0 && e.isEmpty && DataChunk() == e)
        #expect((e + e).isEmpty && e.subrange(0..<0).isEmpty && e.map().isEmpty)
        var calls = 0
        #expect(e.apply { _, _, _ in calls += 1; return true })
        #expect(calls == 0)
        e.withUnsafeBytes { #expect($0.count == 0) }
        let x = DataChunk([1, 2, 3])
        #expect((x + e).root === x.root && (e + x).root === x.root)
        #expect(DataChunk([UInt8]()).isEmpty)
        #expect(e.description == "DataChunk(empty)")
        var destination = [UInt8](repeating: 9, count: 4)
        #expect(destination.withUnsafeMutableBytes { e.copyBytes(to: $0, from: 0..<0) } == 0)
    }

    @Test("description shows size, regions and the first bytes in hex")
    func description() {
        let c = DataChunk(Array("hel".utf8)) + DataChunk(Array("lo".utf8))
        #expect(c.description == "DataChunk(5 bytes, 2 regions: 68 65 6c 6c 6f)")
        let long = DataChunk([UInt8](repeating: 0xAB, count: 40))
        #expect(long.description.hasPrefix("DataChunk(40 bytes, 1 region: ab ab"))
        #expect(long.description.hasSuffix("…)"))
    }

    @Test("1,000,000 one-byte regions appended one at a time")
    func manyRegions() {
        let n = 1_000_000
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: n, alignment: 16)
        for i in 0..<n { storage[i] = UInt8(truncatingIfNeeded: i &* 7) }
        let released = Latch()
        var chunk = DataChunk.empty
        do {
            let whole = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(storage), deallocator: .custom(queue: nil) { bytes in
                bytes.deallocate()
                released.signal()
            })
            for i in 0..<n { chunk = chunk + whole.subrange(i..<(i + 1)) }
        }
        #expect(chunk.count == n && chunk.regionCount == n)
        #expect(Double(chunk.root!.height) <= 1.45 * log2(Double(n)) + 2)
        var sum = 0
        for byte in chunk { sum &+= Int(byte) }
        var expected = 0
        for i in 0..<n { expected &+= Int(UInt8(truncatingIfNeeded: i &* 7)) }
        #expect(sum == expected)
        let (region, offset) = chunk.region(containing: 777_777)
        #expect(offset == 777_777 && region.count == 1 && region[0] == UInt8(truncatingIfNeeded: 777_777 &* 7))
        let middle = chunk.subrange(250_000..<750_000)
        #expect(middle.count == 500_000 && middle.regionCount == 500_000)
        #expect(middle[0] == UInt8(truncatingIfNeeded: 250_000 &* 7))
        #expect(chunk.map().regionCount == 1)
        #expect(!released.wait(timeout: .milliseconds(1)))
        chunk = .empty
        _ = middle
    }

    @Test("a 1 GiB mmap'ed chunk is sliced without copying")
    func gigabyteNoCopy() throws {
        let size = 1 << 30
        let raw = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        try #require(raw != MAP_FAILED)
        let base = UnsafeMutableRawPointer(raw!)
        base.storeBytes(of: 0x5A, toByteOffset: 512 << 20, as: UInt8.self)
        do {
            var chunk: DataChunk? = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(start: base, count: size), deallocator: .unmap)
            let slice = chunk!.subrange((512 << 20)..<((512 << 20) + 4096))
            var pointer: UnsafeRawPointer?
            slice.apply { _, _, bytes in pointer = bytes.baseAddress; return true }
            #expect(pointer == UnsafeRawPointer(base + (512 << 20)), "the slice points into the mapping: no copy")
            chunk = nil
            _ = chunk
            // The slice alone keeps the mapping alive.
            var vec: UInt8 = 0
            #expect(mincore(base + (512 << 20), 4096, &vec) == 0)
            #expect(slice[0] == 0x5A)
        }
        // With the last region gone, the whole gigabyte is unmapped.
        var vec: UInt8 = 0
        #expect(mincore(base, 4096, &vec) == -1 && errno == ENOMEM)
    }
}

@Suite("DataChunk deallocators")
struct DeallocatorTests {
    @Test("custom runs once, on its queue, after the last region is gone")
    func customOnce() {
        let queue = IOQueue(label: "dealloc")
        let calls = Locked(0)
        let onQueue = Locked(false)
        let latch = Latch()
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: 100, alignment: 1)
        bytes.initializeMemory(as: UInt8.self, repeating: 3)
        var slice: DataChunk?
        do {
            let chunk = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(bytes), deallocator: .custom(queue: queue) { b in
                #expect(b.count == 100)
                calls.withLock { $0 += 1 }
                onQueue.withLock { $0 = queue.isCurrent }
                b.deallocate()
                latch.signal()
            })
            slice = chunk.subrange(10..<20) + chunk.subrange(50..<60)
        }
        #expect(!latch.wait(timeout: .milliseconds(30)), "a subrange keeps the bytes alive")
        #expect(slice!.allSatisfy { $0 == 3 })
        slice = nil
        #expect(latch.wait())
        usleep(10_000)
        #expect(calls.withLock { $0 } == 1)
        #expect(onQueue.withLock { $0 })
    }

    @Test("an empty buffer gives .empty and runs its deallocator at once")
    func emptyBuffer() {
        let latch = Latch()
        let chunk = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(start: nil, count: 0), deallocator: .custom(queue: nil) { _ in latch.signal() })
        #expect(chunk.isEmpty)
        #expect(latch.wait())
    }

    @Test(".free and .unmap give the memory back when the last region goes")
    func freeAndUnmap() throws {
        let p = malloc(64)!
        memset(p, 7, 64)
        var freed: DataChunk? = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(start: p, count: 64), deallocator: .free)
        #expect(freed!.allSatisfy { $0 == 7 })
        freed = nil  // free(3) ran (ASan and LeakSanitizer runs check it)
        _ = freed

        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let raw = mmap(nil, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        try #require(raw != MAP_FAILED)
        var vec: UInt8 = 0
        var mapped: DataChunk? = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(start: raw, count: page), deallocator: .unmap)
        let part = mapped!.subrange(1..<2)
        mapped = nil
        _ = mapped
        #expect(mincore(raw, page, &vec) == 0, "still mapped while a subrange lives")
        _ = part.count
    }

    @Test(".none never calls anything and leaves the bytes to the caller")
    func noneDeallocator() {
        var bytes: [UInt8] = [1, 2, 3, 4]
        bytes.withUnsafeBytes { buffer in
            var chunk: DataChunk? = DataChunk(bytesNoCopy: buffer, deallocator: .none)
            #expect(Array(chunk!) == [1, 2, 3, 4])
            chunk = nil
            _ = chunk
        }
        bytes[0] = 9
        #expect(bytes == [9, 2, 3, 4])
    }
}
