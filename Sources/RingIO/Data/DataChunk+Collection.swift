#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension DataChunk: RandomAccessCollection {
    public typealias Element = UInt8
    public typealias Index = Int
    public typealias Indices = Range<Int>
    /// `Slice<DataChunk>` for generic code, which needs the base's indices;
    /// `chunk[a..<b]` written directly gives a `DataChunk` (see `subscript(_:)`).
    public typealias SubSequence = Slice<DataChunk>

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }

    /// The byte at `position`. O(log regions); iterate for sequential access.
    public subscript(position: Int) -> UInt8 {
        precondition(position >= 0 && position < count,
                     "DataChunk index \(position) is out of bounds for a chunk of \(count) bytes")
        let (leaf, start) = root!.leaf(containing: position)
        return leaf.bytes[position - start]
    }

    public func makeIterator() -> Iterator {
        Iterator(root: root)
    }

    public func withContiguousStorageIfAvailable<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R? {
        guard let root else { return try body(UnsafeBufferPointer(start: nil, count: 0)) }
        guard root.isLeaf else { return nil }
        return try withExtendedLifetime(root) {
            try root.bytes.withMemoryRebound(to: UInt8.self, body)
        }
    }

    /// Walks the regions leaf by leaf: O(count) for all bytes, no lookup per byte.
    ///
    /// The step within a region is inlined into the loop that iterates
    /// (`for byte in chunk`): a load and an increment per byte, as an
    /// `Array`'s; only moving to the next region is a call.
    public struct Iterator: IteratorProtocol {
        private var leaves: LeafWalker
        /// The current region (kept alive while its bytes are read).
        private var leaf: Node?
        /// The current region's bytes, and the next byte's offset in them.
        @usableFromInline var base: UnsafeRawPointer?
        @usableFromInline var count = 0
        @usableFromInline var position = 0

        init(root: Node?) {
            leaves = LeafWalker(root)
            if let first = leaves.next() {
                leaf = first
                base = first.base
                count = first.count
            }
        }

        @inlinable
        public mutating func next() -> UInt8? {
            if position < count {
                defer { position &+= 1 }
                return base.unsafelyUnwrapped.load(fromByteOffset: position, as: UInt8.self)
            }
            return nextRegion()
        }

        /// The first byte of the next region, which becomes the current one;
        /// `nil` at the end.
        @usableFromInline
        mutating func nextRegion() -> UInt8? {
            while let next = leaves.next() {
                leaf = next
                base = next.base
                count = next.count
                guard count > 0 else { continue }
                position = 1
                return base.unsafelyUnwrapped.load(as: UInt8.self)
            }
            leaf = nil
            base = nil
            count = 0
            position = 0
            return nil
        }
    }
}

/// The leaves of a region tree, in order, with a stack of pending right subtrees.
struct LeafWalker {
    private var pending: [DataChunk.Node] = []

    init(_ root: DataChunk.Node?) {
        if let root { pending.append(root) }
    }

    mutating func next() -> DataChunk.Node? {
        guard var node = pending.popLast() else { return nil }
        while !node.isLeaf {
            pending.append(node.right!)
            node = node.left!
        }
        return node
    }
}

extension DataChunk: Hashable {
    /// Equal when the bytes are equal, whatever the regions.
    public static func == (lhs: DataChunk, rhs: DataChunk) -> Bool {
        guard lhs.count == rhs.count else { return false }
        if lhs.root === rhs.root { return true }
        guard let l = lhs.root, let r = rhs.root else { return true }
        // Walk both region lists at once, comparing the overlapping pieces.
        var right = RegionCursor(r)
        return l.forEachRegion(in: 0..<l.count) { leaf, piece, _ in
            var bytes = UnsafeRawBufferPointer(rebasing: leaf.bytes[piece])
            while !bytes.isEmpty {
                let other = right.take(upTo: bytes.count)
                if memcmp(bytes.baseAddress!, other.baseAddress!, other.count) != 0 { return false }
                bytes = UnsafeRawBufferPointer(rebasing: bytes[other.count...])
            }
            return true
        }
    }

    /// Hashes the count and the bytes; the same for any region layout.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
        apply { _, _, bytes in
            hasher.combine(bytes: bytes)
            return true
        }
    }
}

/// Hands out a tree's bytes in pieces of any size, in order.
private struct RegionCursor {
    private var leaves: LeafWalker
    private var leaf: DataChunk.Node?
    private var position = 0

    init(_ root: DataChunk.Node) {
        leaves = LeafWalker(root)
        leaf = leaves.next()
    }

    /// The next at most `limit` bytes (at least one while bytes remain).
    mutating func take(upTo limit: Int) -> UnsafeRawBufferPointer {
        while let current = leaf {
            if position < current.count {
                let n = Swift.min(limit, current.count - position)
                defer { position += n }
                return UnsafeRawBufferPointer(start: current.base! + position, count: n)
            }
            leaf = leaves.next()
            position = 0
        }
        return UnsafeRawBufferPointer(start: nil, count: 0)
    }
}

extension DataChunk: CustomStringConvertible, CustomDebugStringConvertible {
    /// The size, the region count and the first bytes in hex:
    /// `DataChunk(5 bytes, 2 regions: 68 65 6c 6c 6f)`.
    public var description: String {
        let shown = Swift.min(count, 16)
        var hex = ""
        for (i, byte) in prefix(shown).enumerated() {
            if i > 0 { hex += " " }
            let digits = String(byte, radix: 16)
            hex += digits.count == 1 ? "0" + digits : digits
        }
        if count > shown { hex += " …" }
        let bytesWord = count == 1 ? "byte" : "bytes"
        let regionsWord = regionCount == 1 ? "region" : "regions"
        return count == 0 ? "DataChunk(empty)" : "DataChunk(\(count) \(bytesWord), \(regionCount) \(regionsWord): \(hex))"
    }

    public var debugDescription: String { description }
}
