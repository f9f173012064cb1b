import Synchronization
import RingIOBase

/// A reader told when the bytes it handed out leave the write queues
/// (a channel read operation).
package protocol ReadAheadHoldReader: AnyObject, Sendable {
    /// Bytes held by writes went back: reading may go on. Called with no
    /// lock held, on the thread that ended the write.
    func readAheadHoldReleased()
}

/// The bytes one read handed out that wait, unwritten, in write operations
/// queued on other files: the read counts them against its buffer limit,
/// as it counts bytes its handler has not yet handled.
///
/// A handler that passes each chunk on to `target.write` returns at once;
/// without this the read would read on as fast as the file gives, and the
/// chunks would pile up in the target's queue: the README's handler copy of
/// 1 GiB grew the resident set by 892 MiB, of 4 GiB by 3.5 GiB. With it the
/// read pauses once its requests in flight, its undelivered bytes and the
/// bytes its chunks hold in writes reach its buffer limit (8 MiB), and goes
/// on as the writes end (Benchmarks/results/natural-path.md).
///
/// The read's buffers carry the hold (`ReadBuffer.hold`); a write made of
/// such chunks takes their bytes when it is queued, and gives them back when
/// its last handler call returns.
// Sendable: `held` is atomic; `reader` is behind its lock.
package final class ReadAheadHold: Sendable {
    private let held = Atomic<Int>(0)
    private let reader: Locked<(any ReadAheadHoldReader)?>

    package init(reader: any ReadAheadHoldReader) {
        self.reader = Locked(reader)
    }

    /// Bytes held in write queues now.
    package var bytes: Int { held.load(ordering: .acquiring) }

    /// A write queued `count` bytes of the read's chunks.
    package func take(_ count: Int) {
        held.add(count, ordering: .releasing)
    }

    /// A write that held `count` bytes ended: tells the reader, if it still
    /// reads.
    package func give(_ count: Int) {
        held.subtract(count, ordering: .releasing)
        reader.withLock { $0 }?.readAheadHoldReleased()
    }

    /// The read ended: nobody is told any more (this breaks the cycle
    /// between the read and its buffers' hold).
    package func detach() {
        reader.withLock { $0 = nil }
    }
}
