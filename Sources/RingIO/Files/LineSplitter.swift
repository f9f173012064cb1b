#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import RingIOData

/// Cuts bytes into lines, a chunk at a time: the pure part of `IO.Lines`.
///
/// `append` searches each region of a chunk from its end for its last
/// `\n` (`memrchr`); the bytes up to it (after the unfinished line carried
/// from earlier regions) are copied once into one `String`, a *block* of
/// whole lines, and the rest is carried. When `next` takes a block up,
/// `memchr` finds its lines in the block's own UTF-8 storage, 4,096 at a
/// time, and makes their bounds as scalar-aligned indices; each `next` then
/// makes one `Substring` of the block, which `String`'s subscript takes
/// without checking its bounds again. One copy and one allocation per
/// region, none per line, no loop over bytes in Swift. Bytes that are not
/// UTF-8 are repaired (U+FFFD) by the `String`, as `String(decoding:as:)`
/// does.
///
/// ```
///  region:  … ab\ncd\r\nef\ngh          (carry: "xy")
///  block:   "xyab\ncd\r\nef\n"  → next: "xyab", "cd", "ef", nil
///  carry:   "gh"
/// ```
package struct LineSplitter {
    /// The longest line accepted, in bytes, without its `\n` or `\r\n`.
    package let maximumLineLength: Int
    /// The bytes of the unfinished line.
    private var carry: [UInt8] = []
    /// Lines handed out so far (for the error's message).
    package private(set) var lineCount = 0
    /// Blocks of whole lines, each ending with `\n`; the first `blockIndex`
    /// are used up.
    private var blocks: [String] = []
    private var blockIndex = 0
    /// The block whose lines `next` is handing out, the bounds of its
    /// lines (without their `\n` or `\r\n`, found with `memchr` when it is
    /// taken up), and the next line's index in them.
    private var block = ""
    private var lines: [Range<String.Index>] = []
    private var position = 0
    /// The index in `block` of the first line `scan` has not found.
    private var nextStart = "".startIndex
    /// The line after `lines` passes the maximum.
    private var tooLong = false
    /// The UTF-8 offset up to which `lines` have been found in `block`.
    private var scanned = 0
    /// The last line, without a newline, once the input has ended.
    private var lastLine: String?
    /// The unfinished line passed the maximum: `next` fails once the lines
    /// before it are out; no more input is kept.
    private var overflowed = false

    /// A line longer than the maximum: its number (from 1).
    package struct LineTooLong: Error, Equatable {
        package let line: Int
        package init(line: Int) { self.line = line }
    }

    package init(maximumLineLength: Int) {
        self.maximumLineLength = Swift.max(maximumLineLength, 0)
    }

    /// Adds `chunk`'s bytes; `next` then hands out the lines it finishes.
    package mutating func append(_ chunk: DataChunk) {
        if blockIndex == blocks.count {
            blocks.removeAll(keepingCapacity: true)
            blockIndex = 0
        }
        chunk.apply { _, _, bytes in
            append(region: bytes)
            return !overflowed
        }
    }

    /// The input has ended: its last bytes, when they do not end with a
    /// newline, are the last line.
    package mutating func finish() {
        guard !carry.isEmpty, !overflowed else { return }
        if carry.count > maximumLineLength {
            overflowed = true
        } else {
            lastLine = String(decoding: carry, as: UTF8.self)
        }
        carry = []
    }

    /// The next line, or `nil` when every line added so far is out (more
    /// input is needed, or, after `finish`, the lines are over).
    ///
    /// - Throws: `LineTooLong` when the next line passes the maximum; the
    ///   lines before it have been handed out.
    @inline(__always)
    package mutating func next() throws(LineTooLong) -> Substring? {
        while position == lines.count {
            if tooLong { throw fail() }
            if scanned == block.utf8.count, !nextBlock() { return try last() }
            scan()
        }
        let line = lines[position]
        position += 1
        lineCount += 1
        return block[line]
    }

    /// Takes up the next block, when there is one.
    private mutating func nextBlock() -> Bool {
        guard blockIndex < blocks.count else { return false }
        block = blocks[blockIndex]
        blocks[blockIndex] = ""  // the block is held once, by `block`
        nextStart = block.startIndex
        blockIndex += 1
        scanned = 0
        return true
    }

    /// The bounds of the block's next lines, up to `scanLines` of them (a
    /// block of a million empty lines takes no more memory than one of a
    /// thousand), stopping before a line past the maximum.
    private mutating func scan() {
        position = 0
        var start = scanned
        let block = self.block, maximum = maximumLineLength
        let utf8 = block.utf8, utf16 = block.utf16
        var from = nextStart
        var tooLong = false
        // A fresh buffer per scan (one allocation per 4,096 lines), written
        // with no checks per line.
        lines = Array(unsafeUninitializedCapacity: Self.scanLines) { buffer, count in
            /// Adds the line from `start` to the newline at `newline` (UTF-8
            /// offsets), unless it is too long. Its bounds are made from the
            /// newline's index with the UTF-16 view's `index(after:)` and
            /// `index(before:)`, which are inlined and mark them as on a
            /// scalar boundary (a newline and a `\r` are one-byte scalars),
            /// so that the subscript in `next` does not check them again
            /// (`scalarAlignSlow`, 14% of a profile before).
            func add(_ start: Int, _ newline: Int, crlf: Bool) -> Bool {
                if newline - (crlf ? 1 : 0) - start > maximum {
                    tooLong = true
                    return false
                }
                let after = utf16.index(after: utf8.index(from, offsetBy: newline - start))
                var to = utf16.index(before: after)
                if crlf { to = utf16.index(before: to) }
                buffer.initializeElement(at: count, to: from..<to)
                count += 1
                from = after
                return true
            }
            let contiguous: Void? = block.utf8.withContiguousStorageIfAvailable { utf8 in
                let base = UnsafeRawPointer(utf8.baseAddress!)
                // A block ends with "\n": every line of it ends at one.
                while count < buffer.count, start < utf8.count,
                      let newline = memchr(base + start, 0x0A, utf8.count - start) {
                    let offset = UnsafeRawPointer(newline) - base
                    guard add(start, offset, crlf: offset > start && utf8[offset - 1] == 0x0D) else { break }
                    start = offset + 1
                }
            }
            if contiguous == nil {
                // Never the case here (every block is a native string), but correct.
                let utf8 = Array(block.utf8)
                while count < buffer.count, start < utf8.count, let offset = utf8[start...].firstIndex(of: 0x0A) {
                    guard add(start, offset, crlf: offset > start && utf8[offset - 1] == 0x0D) else { break }
                    start = offset + 1
                }
            }
        }
        self.tooLong = tooLong
        nextStart = from
        scanned = lines.isEmpty && !tooLong ? block.utf8.count : start
    }

    /// The most line bounds `scan` finds at once.
    package static let scanLines = 4096

    /// After the blocks: the failure the carry recorded, or the last line.
    private mutating func last() throws(LineTooLong) -> Substring? {
        if overflowed { throw fail() }
        guard let line = lastLine else { return nil }
        lastLine = nil
        lineCount += 1
        return Substring(line)
    }

    /// The failure for the next line; nothing is kept after it.
    private mutating func fail() -> LineTooLong {
        (carry, blocks, blockIndex, block, lines, position, tooLong, scanned, lastLine, overflowed) = ([], [], 0, "", [], 0, false, 0, nil, false)
        return LineTooLong(line: lineCount + 1)
    }

    /// Reads up to `capacity` bytes with `fill` straight into the storage
    /// of a new block, after the carry: no copy of the lines read (the
    /// bytes after the last newline are carried, as `append` does).
    ///
    /// - Parameter fill: reads into the buffer it is given and returns how
    ///   many bytes it read (0 at the end of the input), or `nil` when it
    ///   could not read now; then nothing has changed.
    /// - Returns: what `fill` returned.
    package mutating func appendReading(upTo capacity: Int,
                                        _ fill: (UnsafeMutableRawBufferPointer) -> Int?) -> Int? {
        guard !overflowed, capacity > 0 else { return nil }
        if blockIndex == blocks.count {
            blocks.removeAll(keepingCapacity: true)
            blockIndex = 0
        }
        var result: Int?
        let block = String(unsafeUninitializedCapacity: carry.count + capacity) { buffer in
            let storage = UnsafeMutableRawBufferPointer(buffer)
            let carried = carry.count
            guard let count = fill(UnsafeMutableRawBufferPointer(rebasing: storage[carried..<(carried + capacity)])) else { return 0 }
            result = count
            guard count > 0 else { return 0 }
            let bytes = UnsafeRawBufferPointer(rebasing: storage[carried..<(carried + count)])
            guard let lastNewline = cliburing_memrchr(bytes.baseAddress!, 0x0A, count) else {
                carryOn(bytes)
                return 0
            }
            let end = UnsafeRawPointer(lastNewline) - bytes.baseAddress! + 1
            carry.withUnsafeBytes { storage.copyMemory(from: $0) }
            carry.removeAll(keepingCapacity: carry.capacity <= 64 << 10)
            if end < count { carry.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[end...])) }
            return carried + end
        }
        if !block.isEmpty { blocks.append(block) }
        return result
    }

    /// No line ends in `bytes`: the carry grows, up to the maximum (and a
    /// "\r" that may start the "\r\n" after it).
    private mutating func carryOn(_ bytes: UnsafeRawBufferPointer) {
        let count = carry.count + bytes.count
        if count > maximumLineLength + 1 || (count > maximumLineLength && bytes[bytes.count - 1] != 0x0D) {
            overflowed = true
            carry = []
            return
        }
        carry.append(contentsOf: bytes)
    }

    private mutating func append(region bytes: UnsafeRawBufferPointer) {
        guard !overflowed, let base = bytes.baseAddress, bytes.count > 0 else { return }
        guard let lastNewline = cliburing_memrchr(base, 0x0A, bytes.count) else {
            carryOn(bytes)
            return
        }
        let end = UnsafeRawPointer(lastNewline) - base + 1
        // One copy: the carry and the region's bytes up to its last newline
        // straight into the block's storage (which repairs bytes that are
        // not UTF-8).
        blocks.append(String(unsafeUninitializedCapacity: carry.count + end) { buffer in
            let storage = UnsafeMutableRawBufferPointer(buffer)
            carry.withUnsafeBytes { storage.copyMemory(from: $0) }
            UnsafeMutableRawBufferPointer(rebasing: storage[carry.count...])
                .copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[..<end]))
            return storage.count
        })
        carry.removeAll(keepingCapacity: carry.capacity <= 64 << 10)
        if end < bytes.count { carry.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[end...])) }
    }
}
