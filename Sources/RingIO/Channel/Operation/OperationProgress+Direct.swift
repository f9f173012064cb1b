import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine
// Direct I/O and the limits of the file offsets: how an operation's range
// is rounded out to blocks, and which blocks a write must read first.
extension OperationProgress {
    /// At start: a range that reaches past the largest file offset
    /// (`Int64.max`). A read is cut there: it ends at the end of the file,
    /// which no file has beyond it. A write fails with `EINVAL` before any
    /// byte is written, as `pwrite` does when the offset plus the length
    /// overflows.
    mutating func limitToLargestOffset() {
        let room = Int64.max - fileBase  // fileBase >= 0: no overflow
        guard Int64(ioLength) > room else { return }
        switch direction {
        case .read:
            let limit = Int(room)
            ioLength = direct.map { limit / $0.offset * $0.offset } ?? limit
            cutAtLargestOffset = true
            if ioLength == 0 { conclude(.endOfFile) }
        case .write:
            conclude(.failed(.invalidArgument))
        }
    }

    /// At start: rounds the range out to `alignment`.
    mutating func alignToBlocks(_ alignment: DirectAlignment, host: some OperationProgressHost<Payload>) {
        direct = alignment
        let a = alignment.offset
        let start = fileBase - fileBase % Int64(a)
        ioHead = Int(fileBase - start)
        fileBase = start
        // "To the end of file" (Int.max) stays unbounded.
        let (end, overflow) = ioHead.addingReportingOverflow(length)
        userEnd = overflow || end > Int.max - a ? Int.max : end
        ioLength = userEnd == Int.max ? Int.max / a * a : (userEnd + a - 1) / a * a
        requestSize = Swift.max(a, requestSize / a * a)
        if direction == .write && (ioHead != 0 || userEnd != ioLength) {
            // The operation runs alone on its fd (`needsExclusiveRun`): the
            // length cannot change under it.
            if let length = host.fileLength() { lengthAtStart = length }
        }
    }

    /// At start: a direct write has a partial block inside the file, which
    /// must be read for a read-modify-write.
    func needsBlockRead() -> Bool {
        guard direction == .write, let direct else { return false }
        let a = direct.offset
        let head = ioHead != 0 && fileBase < lengthAtStart
        let tail = userEnd != ioLength && fileBase &+ Int64(ioLength - a) < lengthAtStart
        return head || tail
    }

    /// The size of the next slot. A direct write's partial first and last
    /// blocks get slots of their own, one block each, so that only they are
    /// read for the read-modify-write.
    func nextSlotSize(remaining: Int) -> Int {
        var size = Swift.min(requestSize, remaining)
        guard direction == .write, let direct else { return size }
        let a = direct.offset
        if issued == 0 && ioHead != 0 { return a }
        if userEnd < ioLength && remaining > a && size > remaining - a { size = remaining - a }
        return size
    }

    /// How a direct write's slot is filled: whole blocks of the user's bytes,
    /// or a block the user's range covers only in part, read first unless
    /// it lies past the end of file.
    func directFill(start: Int, size: Int) -> NewSlot.Fill {
        let lower = Swift.max(start, ioHead)
        let upper = Swift.min(start + size, userEnd)
        let piece = (lower - ioHead)..<(upper - ioHead)
        guard lower > start || upper < start + size else { return .directWhole(piece: piece) }
        return .directPartial(piece: piece, at: lower - start, prefill: fileBase + Int64(start) < lengthAtStart)
    }

    /// A partial block of which only `read` bytes came from the file (zeros
    /// after them): the write must not leave the file longer than the old
    /// end or the user's end.
    mutating func noteShortBlock(start: Int, size: Int, read: Int) {
        guard read < size else { return }
        let oldEnd = fileBase + Int64(start + read)
        let wanted = Swift.max(oldEnd, fileBase + Int64(userEnd))
        restoreLength = Swift.max(restoreLength ?? 0, wanted)
    }
}
