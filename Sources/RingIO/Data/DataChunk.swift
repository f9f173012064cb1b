#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIOBase
import RingIOQueue

/// Immutable, possibly discontiguous bytes: RingIO's `dispatch_data_t`.
///
/// A chunk is a sequence of *regions*, each a contiguous run of bytes inside
/// a storage that frees itself, through its `Deallocator`, when the last
/// region using it is gone. Chunks share regions freely; nothing is copied
/// that need not be.
///
/// What copies and what does not:
///
/// | Operation                       | Copies bytes?                    | Cost                          |
/// |---------------------------------|----------------------------------|-------------------------------|
/// | `init(bytesNoCopy:deallocator:)`| no                               | O(1)                          |
/// | `init(_:)`, `init(copying:)`    | yes, once                        | O(count)                      |
/// | `concat`, `+`, `+=`, `append`   | no                               | O(log regions)                |
/// | `subrange`, `chunk[a..<b]`      | no                               | O(log regions)                |
/// | `region(containing:)`           | no                               | O(log regions)                |
/// | `contiguous()` (`map()`)        | only if `regionCount > 1`        | O(1) or O(count)              |
/// | `withUnsafeBytes`               | only if `regionCount > 1`        | as `contiguous()`             |
/// | `apply`                         | no                               | O(regions)                    |
/// | `copyBytes(to:from:)`           | into your buffer                 | O(log regions + bytes)        |
/// | iteration (`for byte in chunk`) | no                               | O(count) in all               |
/// | `chunk[i]`                      | no                               | O(log regions)                |
/// | `==`, `hash(into:)`             | no                               | O(count)                      |
///
/// Appending n small chunks one at a time costs O(n log n) in all (libdispatch's
/// record lists make it O(n²)). The regions live in a balanced tree whose nodes
/// carry byte counts, as swift-collections' rope does; see `DataChunk.Node`.
///
/// Equality and hashing are by content: two chunks with the same bytes are
/// equal whatever their regions.
public struct DataChunk: Sendable {
    /// The region tree; `nil` for the empty chunk.
    let root: Node?

    init(root: Node?) {
        self.root = root
    }

    /// How the bytes handed to `init(bytesNoCopy:deallocator:)` are given back.
    public enum Deallocator: Sendable {
        /// `free(3)`, inline, when the last region goes.
        case free
        /// `munmap(2)` of the whole buffer, inline, when the last region goes.
        case unmap
        /// Nothing: the caller keeps ownership and must keep the bytes valid
        /// (and unchanged) while any chunk refers to them.
        case none
        /// `body(bytes)` on `queue` (or `IOQueue.global` when `nil`), when the
        /// last region goes.
        case custom(queue: IOQueue?, @Sendable (UnsafeRawBufferPointer) -> Void)
    }

    /// The empty chunk.
    public static let empty = DataChunk(root: nil)

    /// The empty chunk.
    public init() {
        root = nil
    }

    /// A chunk holding a copy of `bytes`.
    public init<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        if let chunk = bytes.withContiguousStorageIfAvailable({ DataChunk(copying: UnsafeRawBufferPointer($0)) }) {
            self = chunk
        } else {
            let array = Array(bytes)
            self = array.withUnsafeBytes { DataChunk(copying: $0) }
        }
    }

    /// A chunk holding a copy of `bytes`.
    public init(copying bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else {
            root = nil
            return
        }
        let storage = Storage.copying(bytes)
        root = Node(storage: storage, base: storage.bytes.baseAddress!, count: bytes.count)
    }

    /// A chunk over `bytes` without copying them; `deallocator` gives them
    /// back when the last region referring to them is gone. An empty buffer
    /// gives `.empty`, and its deallocator runs at once.
    ///
    /// The bytes must not change while any chunk refers to them.
    public init(bytesNoCopy bytes: UnsafeRawBufferPointer, deallocator: Deallocator) {
        guard bytes.count > 0, let base = bytes.baseAddress else {
            Storage.release(bytes, with: deallocator)
            root = nil
            return
        }
        let storage = Storage(bytes: bytes, deallocator: deallocator)
        root = Node(storage: storage, base: base, count: bytes.count)
    }

    /// The storage of a one-region chunk (`nil` otherwise).
    package var soleStorage: (any RegionStorage)? {
        guard let root, root.isLeaf else { return nil }
        return root.keeper
    }

    /// A chunk of the first `count` bytes of `block`, a `SmallBlocks` block
    /// it owns from now on (given back when the last region using it goes;
    /// at once when `count` is 0): one object, no storage beside it.
    package init(smallBlock block: UnsafeMutableRawPointer, count: Int) {
        precondition(count >= 0 && count <= SmallBlocks.size, "a small block holds at most \(SmallBlocks.size) bytes")
        guard count > 0 else {
            SmallBlocks.give(block)
            root = nil
            return
        }
        root = Node(block: block, count: count)
    }

    /// A chunk over `range` of `storage`'s bytes (the engine's read buffers).
    package init(storage: any RegionStorage, range: Range<Int>) {
        guard !range.isEmpty else {
            root = nil
            return
        }
        root = Node(storage: storage, base: storage.bytes.baseAddress! + range.lowerBound, count: range.count)
    }

    /// The number of bytes.
    public var count: Int { root?.count ?? 0 }

    /// The number of contiguous regions; 0 for an empty chunk.
    public var regionCount: Int { root?.regionCount ?? 0 }

    /// Whether the chunk holds no bytes.
    public var isEmpty: Bool { root == nil }

    /// This chunk followed by `other`, without copying bytes. O(log regions).
    ///
    /// The corresponding libdispatch function is `dispatch_data_create_concat`.
    public func concat(_ other: DataChunk) -> DataChunk {
        DataChunk(root: Node.concat(root, other.root))
    }

    /// `lhs.concat(rhs)`.
    public static func + (lhs: DataChunk, rhs: DataChunk) -> DataChunk {
        lhs.concat(rhs)
    }

    /// The bytes in `range`, without copying. O(log regions).
    ///
    /// - Precondition: `range` lies within `0...count`.
    ///
    /// The corresponding libdispatch function is `dispatch_data_create_subrange`.
    public func subrange(_ range: Range<Int>) -> DataChunk {
        precondition(range.lowerBound >= 0 && range.upperBound <= count,
                     "DataChunk.subrange(\(range)) is out of bounds for a chunk of \(count) bytes")
        guard let root else { return self }
        return DataChunk(root: Node.slice(root, range))
    }

    /// The same bytes in at most one region: `self` when the chunk already
    /// is contiguous (no copy), else one new buffer with every byte copied.
    ///
    /// The corresponding libdispatch function is `dispatch_data_create_map`.
    public func contiguous() -> DataChunk {
        guard let root, !root.isLeaf else { return self }
        let storage = Storage.allocate(count: root.count) { destination in
            _ = root.forEachRegion(in: 0..<root.count) { leaf, range, offset in
                let piece = UnsafeRawBufferPointer(rebasing: leaf.bytes[range])
                UnsafeMutableRawBufferPointer(rebasing: destination[offset..<(offset + piece.count)]).copyMemory(from: piece)
                return true
            }
        }
        return DataChunk(storage: storage, range: 0..<root.count)
    }

    /// Calls `body` with the bytes as one contiguous buffer (copying them
    /// first only when there is more than one region).
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        guard let root else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        if root.isLeaf {
            return try withExtendedLifetime(root) { try body(root.bytes) }
        }
        return try contiguous().withUnsafeBytes(body)
    }

    /// Visits the regions in order: `body(region, offset, bytes)` gets the
    /// region as a chunk, its offset in this chunk and its bytes. Stops when
    /// `body` returns false. Never calls `body` for an empty chunk.
    ///
    /// - Returns: false if `body` stopped the walk, true otherwise.
    ///
    /// The corresponding libdispatch function is `dispatch_data_apply`.
    @discardableResult
    public func apply(_ body: (_ region: DataChunk, _ offset: Int, _ bytes: UnsafeRawBufferPointer) throws -> Bool) rethrows -> Bool {
        guard let root else { return true }
        return try root.forEachRegion(in: 0..<root.count) { leaf, _, offset in
            try body(DataChunk(root: leaf), offset, leaf.bytes)
        }
    }

    /// The region holding byte `location`, and the offset of that region's
    /// first byte in this chunk. O(log regions).
    ///
    /// - Precondition: `0 <= location < count`.
    ///
    /// The corresponding libdispatch function is `dispatch_data_copy_region`.
    public func region(containing location: Int) -> (region: DataChunk, offset: Int) {
        precondition(location >= 0 && location < count,
                     "DataChunk.region(containing: \(location)) is out of bounds for a chunk of \(count) bytes")
        let (leaf, start) = root!.leaf(containing: location)
        return (DataChunk(root: leaf), start)
    }

    /// Copies the bytes in `range` (or as many as fit) into `destination`.
    ///
    /// - Returns: the number of bytes copied: `min(range.count, destination.count)`.
    /// - Precondition: `range` lies within `0...count`.
    public func copyBytes(to destination: UnsafeMutableRawBufferPointer, from range: Range<Int>) -> Int {
        precondition(range.lowerBound >= 0 && range.upperBound <= count,
                     "DataChunk.copyBytes(from: \(range)) is out of bounds for a chunk of \(count) bytes")
        let n = Swift.min(range.count, destination.count)
        guard n > 0, let root else { return 0 }
        let base = range.lowerBound
        _ = root.forEachRegion(in: base..<(base + n)) { leaf, piece, offset in
            let source = UnsafeRawBufferPointer(rebasing: leaf.bytes[piece])
            let at = offset - base
            UnsafeMutableRawBufferPointer(rebasing: destination[at..<(at + source.count)]).copyMemory(from: source)
            return true
        }
        return n
    }

    /// Calls `body` with each region's bytes in `range` (clipped), in order.
    /// Internal: the write path uses it to build iovecs without copying.
    func forEachRegion(in range: Range<Int>, _ body: (UnsafeRawBufferPointer) throws -> Bool) rethrows {
        guard let root else { return }
        _ = try root.forEachRegion(in: range) { leaf, piece, _ in
            try body(UnsafeRawBufferPointer(rebasing: leaf.bytes[piece]))
        }
    }
}
