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
/// from earlier regions) become one `String`, a *block* of whole lines,
/// and the rest is carried. `next` hands the lines of the blocks out one
/// at a time: a `memchr` from the end of the previous line in the block's
/// own UTF-8 storage, and a `Substring` of the block. One copy and one
/// allocation per region, none per line, no loop over bytes in Swift, and
/// no array of lines. Bytes that are not UTF-8 are repaired (U+FFFD) by
/// the `String`, as `String(decoding:as:)` does.
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
    /// The block whose lines `next` is handing out, and the UTF-8 offset of
    /// its next line.
    private var block = ""
    private var position = 0
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
    package mutating func next() throws(LineTooLong) -> Substring? {
        if position == block.utf8.count, !nextBlock() { return try last() }
        let maximum = maximumLineLength
        let start = position
        // A block ends with "\n", so memchr always finds one.
        let found = block.utf8.withContiguousStorageIfAvailable { utf8 -> (end: Int, next: Int)? in
            let base = UnsafeRawPointer(utf8.baseAddress!)
            guard let newline = memchr(base + start, 0x0A, utf8.count - start) else { return nil }
            let offset = UnsafeRawPointer(newline) - base
            var end = offset
            if end > start && utf8[end - 1] == 0x0D { end -= 1 }
            return (end, offset + 1)
        }
        guard let (end, next) = found ?? slowSearch(from: start) else { return nil }
        if end - start > maximum { throw fail() }
        position = next
        lineCount += 1
        let utf8 = block.utf8
        let from = utf8.index(utf8.startIndex, offsetBy: start)
        let to = utf8.index(from, offsetBy: end - start)
        return block[from..<to]
    }

    /// The next block, when there is one.
    private mutating func nextBlock() -> Bool {
        guard blockIndex < blocks.count else { return false }
        block = blocks[blockIndex]
        blocks[blockIndex] = ""  // the block is held once, by `block`
        blockIndex += 1
        position = 0
        return true
    }

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
        (carry, blocks, blockIndex, block, position, lastLine, overflowed) = ([], [], 0, "", 0, nil, false)
        return LineTooLong(line: lineCount + 1)
    }

    /// `next`'s search for a string without contiguous UTF-8 (never made
    /// here: every block is a native string).
    private func slowSearch(from start: Int) -> (end: Int, next: Int)? {
        let utf8 = block.utf8
        let from = utf8.index(utf8.startIndex, offsetBy: start)
        guard let newline = utf8[from...].firstIndex(of: 0x0A) else { return nil }
        let offset = utf8.distance(from: utf8.startIndex, to: newline)
        var end = offset
        if end > start && utf8[utf8.index(before: newline)] == 0x0D { end -= 1 }
        return (end, offset + 1)
    }

    private mutating func append(region bytes: UnsafeRawBufferPointer) {
        guard !overflowed, let base = bytes.baseAddress, bytes.count > 0 else { return }
        guard let lastNewline = cliburing_memrchr(base, 0x0A, bytes.count) else {
            // No line ends here: the carry grows, up to the maximum (and a
            // "\r" that may start the "\r\n" after it).
            let count = carry.count + bytes.count
            if count > maximumLineLength + 1 || (count > maximumLineLength && bytes[bytes.count - 1] != 0x0D) {
                overflowed = true
                carry = []
                return
            }
            carry.append(contentsOf: bytes)
            return
        }
        let end = UnsafeRawPointer(lastNewline) - base + 1
        if carry.isEmpty {
            blocks.append(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[..<end]), as: UTF8.self))
        } else {
            carry.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<end]))
            blocks.append(String(decoding: carry, as: UTF8.self))
            carry.removeAll(keepingCapacity: carry.capacity <= 64 << 10)
        }
        if end < bytes.count { carry.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[end...])) }
    }
}
