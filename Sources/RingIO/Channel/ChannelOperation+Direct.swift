#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
@_spi(Engine) import RingIOEngine

// Direct I/O and the limits of the file offsets: how an operation's range
// is rounded out to blocks, and which blocks a write must read first.
extension ChannelOperation {
    /// With the lock held, at start: a range that reaches past the largest
    /// file offset (`Int64.max`). A read is cut there: it ends at the end of
    /// the file, which no file has beyond it. A write fails with `EINVAL`
    /// before any byte is written, as `pwrite` does when the offset plus the
    /// length overflows.
    func limitToLargestOffsetLocked() {
        let room = Int64.max - fileBase  // fileBase >= 0: no overflow
        guard Int64(ioLength) > room else { return }
        switch direction {
        case .read:
            let limit = Int(room)
            ioLength = direct.map { limit / $0.offset * $0.offset } ?? limit
            cutAtLargestOffset = true
            if ioLength == 0 { end = .endOfFile }
        case .write:
            end = .failed(.invalidArgument)
        }
    }

    // MARK: - direct I/O

    /// With the lock held, at start: rounds the range out to `alignment`.
    func alignToBlocksLocked(_ alignment: DirectAlignment) {
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
        if direction == .write && (ioHead != 0 || userEnd != ioLength), let entry {
            // The operation runs alone on its fd (`needsExclusiveRun`): the
            // length cannot change under it.
            var st = stat()
            if fstat(entry.fd, &st) == 0 { lengthAtStart = Int64(st.st_size) }
        }
    }

    /// With the lock held, at start: a direct write has a partial block
    /// inside the file, which must be read for a read-modify-write.
    func needsBlockReadLocked() -> Bool {
        guard direction == .write, let direct else { return false }
        let a = direct.offset
        let head = ioHead != 0 && fileBase < lengthAtStart
        let tail = userEnd != ioLength && fileBase &+ Int64(ioLength - a) < lengthAtStart
        return head || tail
    }

    /// With the lock held: the size of the next slot. A direct write's
    /// partial first and last blocks get slots of their own, one block each,
    /// so that only they are read for the read-modify-write.
    func nextSlotSizeLocked(remaining: Int) -> Int {
        var size = Swift.min(requestSize, remaining)
        guard direction == .write, let direct else { return size }
        let a = direct.offset
        if issued == 0 && ioHead != 0 { return a }
        if userEnd < ioLength && remaining > a && size > remaining - a { size = remaining - a }
        return size
    }

    /// With the lock held: a direct write's slot. Bytes already aligned in
    /// memory go as they are; others are copied into an aligned buffer; a
    /// block the user's range covers only in part is read first
    /// (`readModifyWriteLocked` puts the bytes in).
    func directWriteSlotLocked(start: Int, size: Int, alignment: DirectAlignment) -> Slot {
        let lower = Swift.max(start, ioHead)
        let upper = Swift.min(start + size, userEnd)
        let piece = data.subrange((lower - ioHead)..<(upper - ioHead))
        let partial = lower > start || upper < start + size
        if !partial, piece.regionCount == 1,
           piece.withUnsafeBytes({ Int(bitPattern: $0.baseAddress) % alignment.memory == 0 }) {
            return Slot(start: start, size: size, buffer: nil, piece: piece)
        }
        let buffer = ReadBuffer(capacity: size, pool: BufferPool.shared,
                                alignment: alignment.memory)
        let slot = Slot(start: start, size: size, buffer: buffer, piece: piece)
        if partial && fileBase + Int64(start) < lengthAtStart {
            slot.prefill = true
        } else if partial {
            mergeLocked(slot, read: 0)  // past the end of file: nothing to read
        } else {
            _ = piece.copyBytes(to: UnsafeMutableRawBufferPointer(start: buffer.pointer, count: size), from: 0..<size)
        }
        return slot
    }

    /// With the lock held: a direct write's block came back from the file
    /// (`read` bytes of it; fewer at the end of file): the user's bytes go
    /// into it, and the request that writes it back is returned.
    func readModifyWriteLocked(_ slot: Slot, read: Int, fd: Int32) -> IORequest {
        slot.prefill = false
        mergeLocked(slot, read: read)
        return makeRequestLocked(slot, fd: fd)
    }

    /// With the lock held: puts the user's bytes into a partial block of
    /// which `read` bytes came from the file (zeros after them).
    func mergeLocked(_ slot: Slot, read: Int) {
        let buffer = slot.buffer!
        if read < slot.size {
            (buffer.pointer + read).initializeMemory(as: UInt8.self, repeating: 0, count: slot.size - read)
            // The block reached past the end of file: the write must not
            // leave the file longer than the old end or the user's end.
            let oldEnd = fileBase + Int64(slot.start + read)
            let wanted = Swift.max(oldEnd, fileBase + Int64(userEnd))
            restoreLength = Swift.max(restoreLength ?? 0, wanted)
        }
        let at = Swift.max(slot.start, ioHead) - slot.start
        _ = slot.piece.copyBytes(to: UnsafeMutableRawBufferPointer(start: buffer.pointer + at, count: slot.piece.count),
                                 from: 0..<slot.piece.count)
    }
}
