import RingIOBase

/// The region tree: a persistent AVL tree whose leaves are regions and whose
/// nodes carry byte and region counts.
///
/// ```
///                  ┌──────────────────────┐
///                  │ count 10, regions 3  │
///                  └──────┬────────┬──────┘
///            ┌────────────┘        └───────────┐
///  ┌─────────┴─────────┐             ┌─────────┴─────────┐
///  │ count 6, regions 2│             │ leaf: 4 bytes of C│
///  └────┬─────────┬────┘             └───────────────────┘
///  ┌────┴────┐ ┌──┴──────┐
///  │ leaf: 2 │ │ leaf: 4 │      a leaf = (storage, base pointer, count);
///  │ bytes A │ │ bytes B │      several leaves may share one storage
///  └─────────┘ └─────────┘
/// ```
///
/// Nodes are immutable and shared between chunks: `concat` joins two trees
/// along one spine (O(|height difference|) new nodes), `subrange` splits
/// along two root-to-leaf paths (O(log regions) new nodes). Heights differ by
/// at most one between siblings, so a tree of n regions is at most
/// 1.44·log2(n) deep.
extension DataChunk {
    // @unchecked: every field is immutable after init; `base` points at
    // bytes that are never written after their storage was created, and
    // `storage` (or the leaf itself, for a `SmallBlocks` block it owns)
    // keeps them alive.
    final class Node: @unchecked Sendable {
        let left: Node?
        let right: Node?
        /// What keeps a leaf's bytes alive; `nil` for an inner node, and
        /// for a leaf that owns its bytes (`ownsBlock`).
        let storage: (any RegionStorage)?
        let base: UnsafeRawPointer?
        let count: Int
        let regionCount: Int
        let height: Int
        /// A leaf whose bytes are a `SmallBlocks` block it gives back when
        /// it goes: one object for a small read (no storage object); its
        /// slices keep it alive as their storage.
        let ownsBlock: Bool

        /// A leaf: `count` bytes at `base`, inside `storage`. `count > 0`.
        init(storage: any RegionStorage, base: UnsafeRawPointer, count: Int) {
            self.left = nil
            self.right = nil
            self.storage = storage
            self.base = base
            self.count = count
            self.regionCount = 1
            self.height = 0
            self.ownsBlock = false
        }

        /// A leaf over the first `count` bytes of `block`, a `SmallBlocks`
        /// block it owns from now on. `count > 0`.
        init(block: UnsafeMutableRawPointer, count: Int) {
            self.left = nil
            self.right = nil
            self.storage = nil
            self.base = UnsafeRawPointer(block)
            self.count = count
            self.regionCount = 1
            self.height = 0
            self.ownsBlock = true
        }

        deinit {
            if ownsBlock { SmallBlocks.give(UnsafeMutableRawPointer(mutating: base!)) }
        }

        /// An inner node over two non-empty subtrees.
        init(_ left: Node, _ right: Node) {
            self.left = left
            self.right = right
            self.storage = nil
            self.base = nil
            self.count = left.count + right.count
            self.regionCount = left.regionCount + right.regionCount
            self.height = Swift.max(left.height, right.height) + 1
            self.ownsBlock = false
        }

        /// What keeps a leaf's bytes alive: its storage, or the leaf
        /// itself when it owns them. Only for leaves.
        @inline(__always) var keeper: any RegionStorage { storage ?? self }

        @inline(__always) var isLeaf: Bool { left == nil }

        /// The leaf's bytes. Only for leaves.
        @inline(__always) var bytes: UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(start: base, count: count)
        }

        /// A leaf for `range` of this leaf's bytes (itself when it is the whole).
        func leaf(_ range: Range<Int>) -> Node {
            if range.count == count { return self }
            return Node(storage: keeper, base: base! + range.lowerBound, count: range.count)
        }

        // MARK: concatenation (AVL join without a middle key)

        static func concat(_ a: Node?, _ b: Node?) -> Node? {
            guard let a else { return b }
            guard let b else { return a }
            return join(a, b)
        }

        static func join(_ l: Node, _ r: Node) -> Node {
            if l.height > r.height + 1 { return joinRight(l, r) }
            if r.height > l.height + 1 { return joinLeft(l, r) }
            return Node(l, r)
        }

        /// `l` is at least two taller than `r`: go down `l`'s right spine.
        private static func joinRight(_ l: Node, _ r: Node) -> Node {
            let ll = l.left!, lr = l.right!
            if lr.height <= r.height + 1 {
                let t = Node(lr, r)
                if t.height <= ll.height + 1 { return Node(ll, t) }
                return rotateLeft(Node(ll, rotateRight(t)))
            }
            let t = joinRight(lr, r)
            let joined = Node(ll, t)
            return t.height <= ll.height + 1 ? joined : rotateLeft(joined)
        }

        /// `r` is at least two taller than `l`: go down `r`'s left spine.
        private static func joinLeft(_ l: Node, _ r: Node) -> Node {
            let rl = r.left!, rr = r.right!
            if rl.height <= l.height + 1 {
                let t = Node(l, rl)
                if t.height <= rr.height + 1 { return Node(t, rr) }
                return rotateRight(Node(rotateLeft(t), rr))
            }
            let t = joinLeft(l, rl)
            let joined = Node(t, rr)
            return t.height <= rr.height + 1 ? joined : rotateRight(joined)
        }

        /// (a, (b, c)) → ((a, b), c)
        private static func rotateLeft(_ n: Node) -> Node {
            let r = n.right!
            return Node(Node(n.left!, r.left!), r.right!)
        }

        /// ((a, b), c) → (a, (b, c))
        private static func rotateRight(_ n: Node) -> Node {
            let l = n.left!
            return Node(l.left!, Node(l.right!, n.right!))
        }

        // MARK: splitting

        /// The first `k` bytes and the rest; `nil` for an empty side.
        static func split(_ n: Node, at k: Int) -> (Node?, Node?) {
            if k <= 0 { return (nil, n) }
            if k >= n.count { return (n, nil) }
            if n.isLeaf { return (n.leaf(0..<k), n.leaf(k..<n.count)) }
            let l = n.left!, r = n.right!
            if k == l.count { return (l, r) }
            if k < l.count {
                let (a, b) = split(l, at: k)
                return (a, concat(b, r))
            }
            let (a, b) = split(r, at: k - l.count)
            return (concat(l, a), b)
        }

        /// The bytes in `range`, without copying.
        static func slice(_ n: Node, _ range: Range<Int>) -> Node? {
            if range.isEmpty { return nil }
            if range.lowerBound == 0 && range.upperBound == n.count { return n }
            // Descend while the range lies inside one child: no new nodes there.
            if !n.isLeaf {
                let l = n.left!
                if range.upperBound <= l.count { return slice(l, range) }
                if range.lowerBound >= l.count {
                    return slice(n.right!, (range.lowerBound - l.count)..<(range.upperBound - l.count))
                }
            } else {
                return n.leaf(range)
            }
            let (_, tail) = split(n, at: range.lowerBound)
            let (middle, _) = split(tail!, at: range.count)
            return middle
        }

        /// A balanced tree over `leaves` (in order), built bottom-up in O(n).
        static func build(_ leaves: ArraySlice<Node>) -> Node? {
            switch leaves.count {
            case 0: return nil
            case 1: return leaves.first
            default:
                let mid = leaves.startIndex + leaves.count / 2
                return Node(build(leaves[..<mid])!, build(leaves[mid...])!)
            }
        }

        // MARK: lookup and traversal

        /// The leaf holding byte `location` and the offset of that leaf's first byte.
        func leaf(containing location: Int) -> (leaf: Node, start: Int) {
            var node = self
            var start = 0
            while !node.isLeaf {
                let l = node.left!
                if location - start < l.count {
                    node = l
                } else {
                    start += l.count
                    node = node.right!
                }
            }
            return (node, start)
        }

        /// Calls `body` with each leaf overlapping `range` (clipped to it) and
        /// the clipped piece's offset in this tree; stops when `body` returns false.
        /// Returns false if stopped.
        func forEachRegion(in range: Range<Int>, offset: Int = 0,
                           _ body: (Node, Range<Int>, Int) throws -> Bool) rethrows -> Bool {
            if range.isEmpty { return true }
            if isLeaf {
                return try body(self, range, offset + range.lowerBound)
            }
            let l = left!
            if range.lowerBound < l.count {
                let inLeft = range.lowerBound..<Swift.min(range.upperBound, l.count)
                if try !l.forEachRegion(in: inLeft, offset: offset, body) { return false }
            }
            if range.upperBound > l.count {
                let inRight = Swift.max(range.lowerBound - l.count, 0)..<(range.upperBound - l.count)
                return try right!.forEachRegion(in: inRight, offset: offset + l.count, body)
            }
            return true
        }

        /// Checks the AVL and summary invariants (tests).
        func checkInvariants() -> Bool {
            if isLeaf { return count > 0 && regionCount == 1 && height == 0 && (storage != nil) != ownsBlock }
            let l = left!, r = right!
            return abs(l.height - r.height) <= 1
                && height == Swift.max(l.height, r.height) + 1
                && count == l.count + r.count
                && regionCount == l.regionCount + r.regionCount
                && l.checkInvariants() && r.checkInvariants()
        }
    }
}

/// A leaf that owns its bytes is the storage of its slices.
extension DataChunk.Node: RegionStorage {
    var registered: RegisteredBuffer? { nil }
}
