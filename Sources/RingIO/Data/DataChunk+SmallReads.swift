import RingIOBase

// A small read (at most `SmallBlocks.size` bytes) into a block whose leaf
// is reused: each thread keeps the leaf of its last full small read, and
// once the chunk made of it is gone (the leaf is uniquely referenced
// again), the next read of the same length on that thread fills the same
// block and hands out the same leaf. A read loop then allocates nothing.
extension DataChunk {
    /// Memory for one small read whose bytes become a chunk: the thread's
    /// idle leaf of that length, or a fresh `SmallBlocks` block. End it with
    /// `chunk(count:)` (bytes were read) or `giveBack()` (none were).
    package struct SmallRead {
        /// The thread's leaf, referenced by nothing else: its block is `pointer`.
        private let reused: Node?
        /// Where the read puts its bytes (`length` of them at most).
        package let pointer: UnsafeMutableRawPointer
        private let length: Int

        /// For a read of `length` bytes, `0 < length <= SmallBlocks.size`.
        package init(length: Int) {
            precondition(length > 0 && length <= SmallBlocks.size,
                         "a small read is of 1 to \(SmallBlocks.size) bytes")
            self.length = length
            if let object = ThreadSlot.take() {
                var leaf = Unmanaged<Node>.fromOpaque(object).takeRetainedValue()
                // Unique: no chunk holds it any more (a slice would hold it
                // as its storage), so its bytes may be written again. The
                // reference count is loaded with acquire ordering: a thread
                // that read the bytes released its reference after.
                if leaf.count == length && isKnownUniquelyReferenced(&leaf) {
                    reused = leaf
                    pointer = UnsafeMutableRawPointer(mutating: leaf.base!)
                    return
                }
                // Still held, or of another length: it goes when its last
                // chunk does.
            }
            reused = nil
            pointer = SmallBlocks.take()
        }

        /// The chunk of the first `count` bytes read (`count <= length`).
        package func chunk(count: Int) -> DataChunk {
            precondition(count >= 0 && count <= length, "a small read of \(length) bytes read \(count)")
            guard let reused else {
                let chunk = DataChunk(smallBlock: pointer, count: count)
                if count == length, let leaf = chunk.root { Self.keep(leaf) }
                return chunk
            }
            defer { Self.keep(reused) }
            if count == length { return DataChunk(root: reused) }
            // Fewer (the end of the file): a copy; the leaf stays for the next read.
            guard count > 0 else { return .empty }
            let block = SmallBlocks.take()
            block.copyMemory(from: pointer, byteCount: count)
            return DataChunk(smallBlock: block, count: count)
        }

        /// Nothing was read into it.
        package func giveBack() {
            if let reused { Self.keep(reused) } else { SmallBlocks.give(pointer) }
        }

        /// `leaf` becomes the thread's, for its next small read of the same length.
        private static func keep(_ leaf: Node) {
            let object = Unmanaged.passRetained(leaf)
            if !ThreadSlot.give(object.toOpaque(), release: releaseLeaf) { object.release() }
        }
    }
}

/// What a thread's slot holds when the thread ends: a leaf, let go of.
private let releaseLeaf: @convention(c) (UnsafeMutableRawPointer?) -> Void = { object in
    guard let object else { return }
    Unmanaged<DataChunk.Node>.fromOpaque(object).release()
}
