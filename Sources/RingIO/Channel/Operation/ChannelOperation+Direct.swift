#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
@_spi(Engine) import RingIOEngine
import RingIOBase
import RingIOData
import RingIOQueue

// The buffers of the slots the progress opens: read buffers (within the
// read budget), the user's bytes of a write, and direct I/O's aligned copies
// and read-modify-write blocks.
extension ChannelOperation {
    /// With the lock held (`Host.makeSlot`, inside a transition of `state`,
    /// which it must not touch): the kernel side of a new slot; `nil` when a
    /// read must wait for read-budget bytes.
    func makeSlotLocked(_ slot: NewSlot) -> SlotIO? {
        switch slot.fill {
        case .read:
            let alignment = slot.memoryAlignment
            // Reads that may wait for a peer (pipes, sockets) stay out of the
            // budget: idle ones must not starve file reads.
            let footprint = mayBlock ? 0 : ReadBuffer.footprint(capacity: slot.size, pool: BufferPool.shared,
                                                                 alignment: alignment)
            guard footprint == 0 || takeBudgetLocked(footprint) else { return nil }
            let buffer = ReadBuffer(capacity: slot.size, pool: BufferPool.shared, alignment: alignment,
                                    budget: engine.readBudget, charge: footprint, hold: readAheadHold)
            return SlotIO(id: slot.id, buffer: buffer, piece: .empty)
        case .write(let piece):
            return SlotIO(id: slot.id, buffer: nil, piece: data.subrange(piece))
        case .directWhole(let range):
            // Bytes already aligned in memory go as they are; others are
            // copied into an aligned buffer.
            let piece = data.subrange(range)
            let alignment = slot.memoryAlignment
            if piece.regionCount == 1, piece.withUnsafeBytes({ Int(bitPattern: $0.baseAddress) % alignment == 0 }) {
                return SlotIO(id: slot.id, buffer: nil, piece: piece)
            }
            let buffer = ReadBuffer(capacity: slot.size, pool: BufferPool.shared, alignment: alignment)
            _ = piece.copyBytes(to: UnsafeMutableRawBufferPointer(start: buffer.pointer, count: slot.size),
                                from: 0..<slot.size)
            return SlotIO(id: slot.id, buffer: buffer, piece: piece)
        case .directPartial(let range, let at, let prefill):
            // A block the user's range covers only in part: read first
            // (`merge` once it is back), or past the end of file: zeros.
            let buffer = ReadBuffer(capacity: slot.size, pool: BufferPool.shared, alignment: slot.memoryAlignment)
            var io = SlotIO(id: slot.id, buffer: buffer, piece: data.subrange(range))
            io.mergeAt = at
            if !prefill { merge(io, read: 0) }
            return io
        }
    }

    /// Puts the user's bytes into a partial block of which `read` bytes came
    /// from the file (zeros after them). The progress notes the length the
    /// file must keep (`noteShortBlock`).
    func merge(_ io: SlotIO, read: Int) {
        let buffer = io.buffer!
        let size = buffer.bytes.count
        if read < size {
            (buffer.pointer + read).initializeMemory(as: UInt8.self, repeating: 0, count: size - read)
        }
        _ = io.piece.copyBytes(to: UnsafeMutableRawBufferPointer(start: buffer.pointer + io.mergeAt, count: io.piece.count),
                               from: 0..<io.piece.count)
    }
}
