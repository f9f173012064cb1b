import RingIOBase
import RingIOData
@_spi(Engine) import RingIOEngine

// What the entry asks of an operation before it starts: whether it may go
// out in a coalesced `pwritev`, and whether it must run alone. Each reads
// only what is fixed at creation (the `let`s), so the shell may ask without
// its lock.
extension OperationProgress {
    /// A stream write on a regular file that goes out as one request
    /// (`ChannelSettings.requestSize`) and has no interval: it may go out in
    /// one `pwritev` with the stream writes queued next to it
    /// (`CoalescedWrite`). Such a write makes exactly one handler call, its
    /// last, and the entry queues those in submission order, so coalescing
    /// changes no handler sequence.
    ///
    /// On an `O_APPEND` fd too (not in direct-I/O mode): one `pwritev` there
    /// lands whole at the end of the file, whatever its offset, as one
    /// `write(2)` would, and the entry keeps one such run in flight at a
    /// time (`EntrySchedulerHost.appendMode`), so the runs land in order. A
    /// log of 4 KiB records queued with handlers went from 0.18× to the rate
    /// of the same log opened `.truncate` (Benchmarks/results/natural-path.md).
    /// - Parameter context: what the entry says of the file (`channelBase`
    ///   is not used); asked only for a stream write.
    func isPipelinableWrite(_ context: @autoclosure () -> StartContext) -> Bool {
        guard isStream && direction == .write && settings.interval == nil && length <= settings.requestSize else {
            return false
        }
        let context = context()
        guard context.positionalFile else { return false }
        guard let alignment = context.directAlignment else { return true }
        // Direct I/O: whole blocks only (the entry checks the position), and
        // never appending (the end of the file need not be aligned).
        return !context.appendMode && length % alignment.offset == 0
    }

    /// A write in direct-I/O mode that may read-modify-write a block (a
    /// random write with an unaligned end, or a stream write that would not
    /// start and end aligned at `streamPosition`, or whose position is not
    /// known yet): it runs alone on its entry.
    /// - Parameters:
    ///   - alignment: the fd's direct-I/O alignment.
    ///   - streamPosition: a stream write's file position when it would
    ///     start, if known.
    ///   - channelBase: a random channel's base (its offsets count from it).
    func needsExclusiveRun(_ alignment: DirectAlignment, streamPosition: Int64?, channelBase: Int64) -> Bool {
        guard direction == .write else { return false }
        let a = Int64(alignment.offset)
        let start: Int64
        if isStream {
            guard let streamPosition else { return true }
            start = streamPosition
        } else {
            start = channelBase &+ userOffset
        }
        return start % a != 0 || (start &+ Int64(length)) % a != 0
    }

    /// In direct-I/O mode: whether this write's bytes may go to the file as
    /// they are, in a `pwritev` with others (each region aligned in memory
    /// and a whole number of blocks long).
    func mayCoalesce(_ alignment: DirectAlignment) -> Bool {
        var aligned = true
        data.apply { _, _, bytes in
            aligned = Int(bitPattern: bytes.baseAddress) % alignment.memory == 0 && bytes.count % alignment.offset == 0
            return aligned
        }
        return aligned
    }
}
