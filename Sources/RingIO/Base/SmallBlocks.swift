#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing

/// Blocks of `size` bytes for small reads (a 4 KiB random read, say), kept
/// for reuse: such a read then allocates no bytes.
///
/// Each thread keeps up to 8 idle blocks of its own, with no lock (a read
/// loop takes a block and its chunk gives it back on the same thread);
/// beyond those, up to `maximumIdle` are shared under a lock (256 KiB), and
/// the rest are freed. A thread's own blocks are freed when it ends.
@usableFromInline
package enum SmallBlocks {
    /// (A constant, not a stored global: a global's every use checks its
    /// lazy initialization.)
    @inlinable package static var size: Int { 4096 }
    static let maximumIdle = 64
    private static let idle = Locked<[UnsafeMutableRawPointer]>({
        var blocks: [UnsafeMutableRawPointer] = []
        blocks.reserveCapacity(maximumIdle)
        return blocks
    }())

    /// Whether a buffer for `capacity` bytes with no alignment asked for is
    /// one of these blocks (malloc aligns them to 16 bytes).
    @inlinable
    package static func fits(capacity: Int, alignment: Int) -> Bool {
        alignment == 0 && capacity <= size
    }

    /// A block: this thread's, a shared idle one, or a new one.
    package static func take() -> UnsafeMutableRawPointer {
        if let block = cliburing_thread_block_take() { return block }
        if let block = idle.withLock({ $0.popLast() }) { return block }
        return malloc(size)!
    }

    /// Gives a block back: to this thread's cache, else to the shared
    /// ones, else to `free`.
    package static func give(_ block: UnsafeMutableRawPointer) {
        if cliburing_thread_block_give(block) != 0 { return }
        let kept = idle.withLock { blocks -> Bool in
            guard blocks.count < maximumIdle else { return false }
            blocks.append(block)
            return true
        }
        if !kept { free(block) }
    }
}
