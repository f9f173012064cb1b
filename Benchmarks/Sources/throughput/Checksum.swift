// Checking what a read delivered without keeping it: a checksum of 4 KiB
// blocks, each block's word sum weighted by its index, so a missing,
// repeated, zeroed or misplaced block changes the total. The source's block
// sums are computed as it is generated; a sequential read must reproduce the
// whole-file total, random reads the total of the blocks they read (in any
// order: the weighted sums add).
import Synchronization

/// The wrapping sum of the little-endian 64-bit words of `bytes` (a partial
/// last word padded with zeros): the same whatever the buffer's alignment.
@inline(__always)
func wordSum(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    var sum: UInt64 = 0
    let words = bytes.count / 8
    guard let base = bytes.baseAddress else { return 0 }
    for i in 0..<words {
        sum &+= UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i * 8, as: UInt64.self))
    }
    for i in (words * 8)..<bytes.count {
        sum &+= UInt64(bytes[i]) << (8 * UInt64(i & 7))
    }
    return sum
}

/// The weight of block `index` in a total: odd and distinct per block.
@inline(__always)
func blockWeight(_ index: Int) -> UInt64 { UInt64(index) &* 0x9E37_79B9_7F4A_7C16 | 1 }

/// The generated source's per-4 KiB-block word sums.
struct SourceSums: Sendable {
    let blocks: [UInt64]

    /// What a complete sequential read checks to.
    var whole: UInt64 { blocks.indices.reduce(0) { $0 &+ blocks[$1] &* blockWeight($1) } }

    /// What 4 KiB reads at `offsets` (4 KiB-aligned) check to.
    func reads<C: Collection>(at offsets: C) -> UInt64 where C.Element == Int64 {
        offsets.reduce(0) { $0 &+ blocks[Int($1 >> 12)] &* blockWeight(Int($1 >> 12)) }
    }
}

/// The checksum of one 4 KiB read at `offset` (4 KiB-aligned), or of the
/// piece of it that starts `position` bytes in: the pieces' checksums add up
/// to the whole read's.
@inline(__always)
func readChecksum(_ bytes: UnsafeRawBufferPointer, at offset: Int64, from position: Int = 0) -> UInt64 {
    var sum: UInt64 = 0
    if position & 7 == 0 {
        sum = wordSum(bytes)
    } else {
        for i in bytes.indices { sum &+= UInt64(bytes[i]) << (8 * UInt64((position + i) & 7)) }
    }
    return sum &* blockWeight(Int(offset >> 12))
}

/// The running checksum of a byte stream delivered in pieces of any size.
struct StreamChecksum {
    private(set) var position = 0
    private var total: UInt64 = 0
    private var block: UInt64 = 0

    mutating func add(_ bytes: UnsafeRawBufferPointer) {
        var i = 0
        while i < bytes.count {
            if position & 4095 == 0 && bytes.count - i >= 4096 {
                // A whole aligned block: one word sum.
                let sum = wordSum(UnsafeRawBufferPointer(rebasing: bytes[i..<(i + 4096)]))
                total &+= sum &* blockWeight(position >> 12)
                position += 4096
                i += 4096
                continue
            }
            block &+= UInt64(bytes[i]) << (8 * UInt64(position & 7))
            position += 1
            i += 1
            if position & 4095 == 0 {
                total &+= block &* blockWeight((position >> 12) - 1)
                block = 0
            }
        }
    }

    /// The total, a partial last block included.
    var value: UInt64 { position & 4095 == 0 ? total : total &+ block &* blockWeight(position >> 12) }
}

/// A stream checksum that handlers on any thread feed (one at a time, in stream order).
final class SharedStreamChecksum: Sendable {
    private let state = Mutex(StreamChecksum())
    func add(_ bytes: UnsafeRawBufferPointer) { state.withLock { $0.add(bytes) } }
    var value: UInt64 { state.withLock { $0.value } }
    var bytes: Int { state.withLock { $0.position } }
}

/// The order-independent sum of random reads' checksums, fed from any thread.
final class ReadChecksums: Sendable {
    private let total = Atomic<UInt64>(0)
    func add(_ bytes: UnsafeRawBufferPointer, at offset: Int64, from position: Int = 0) {
        total.wrappingAdd(readChecksum(bytes, at: offset, from: position), ordering: .relaxed)
    }
    var value: UInt64 { total.load(ordering: .relaxed) }
}

/// Throws unless a read's checksum is the expected one.
func requireChecksum(_ what: String, _ got: UInt64, _ expected: UInt64) throws {
    guard got == expected else {
        throw BenchError("\(what): checksum \(String(got, radix: 16)) of what was read differs from the source's \(String(expected, radix: 16))")
    }
}
