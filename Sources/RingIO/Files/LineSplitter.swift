#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import RingIOData

/// Cuts bytes into lines, a chunk at a time: the pure part of `IO.Lines`.
///
/// Each region of a chunk is searched from its end for its last `\n`
/// (`memrchr`); the bytes up to it (after the unfinished line carried from
/// earlier regions) become one `String`, searched for its `\n`s with
/// `memchr` in its own UTF-8 storage, and each line is a `Substring` of
/// it: one copy and one allocation per region, none per line, and no loop
/// over bytes in Swift. Bytes that are not UTF-8 are repaired (U+FFFD)
/// by the `String`, as `String(decoding:as:)` does.
///
/// ```
///  region:  … ab\ncd\r\nef\ngh          (carry: "xy")
///  block:   "xyab\ncd\r\nef\n"  → "xyab", "cd", "ef"
///  carry:   "gh"
/// ```
package struct LineSplitter {
    /// The longest line accepted, in bytes, without its `\n` or `\r\n`.
    package let maximumLineLength: Int
    /// The bytes of the unfinished line.
    private var carry: [UInt8] = []
    /// Lines finished so far (for the error's message).
    package private(set) var lineCount = 0

    /// A line longer than the maximum: its number (from 1).
    package struct LineTooLong: Error, Equatable {
        package let line: Int
        package init(line: Int) { self.line = line }
    }

    package init(maximumLineLength: Int) {
        self.maximumLineLength = Swift.max(maximumLineLength, 0)
    }

    /// The lines `chunk` finishes, appended to `lines`.
    ///
    /// - Throws: `LineTooLong` when a line (finished or not) passes the
    ///   maximum.
    package mutating func split(_ chunk: DataChunk, into lines: inout [Substring]) throws(LineTooLong) {
        var failure: LineTooLong?
        chunk.apply { _, _, bytes in
            do throws(LineTooLong) {
                try split(region: bytes, into: &lines)
                return true
            } catch {
                failure = error
                return false
            }
        }
        if let failure { throw failure }
    }

    /// The last line, when the bytes did not end with a newline; `nil`
    /// otherwise.
    package mutating func finish() -> Substring? {
        guard !carry.isEmpty else { return nil }
        defer { carry.removeAll() }
        lineCount += 1
        return Substring(String(decoding: carry, as: UTF8.self))
    }

    private mutating func split(region bytes: UnsafeRawBufferPointer, into lines: inout [Substring]) throws(LineTooLong) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        guard let lastNewline = cliburing_memrchr(base, 0x0A, bytes.count) else {
            if carry.count + bytes.count > maximumLineLength + 1 || (carry.count + bytes.count > maximumLineLength
                && bytes[bytes.count - 1] != 0x0D) {
                throw LineTooLong(line: lineCount + 1)
            }
            carry.append(contentsOf: bytes)
            return
        }
        let end = UnsafeRawPointer(lastNewline) - base + 1
        var block: String
        if carry.isEmpty {
            block = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[..<end]), as: UTF8.self)
        } else {
            carry.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<end]))
            block = String(decoding: carry, as: UTF8.self)
            carry.removeAll(keepingCapacity: true)
        }
        if end < bytes.count { carry.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[end...])) }
        try cut(&block, into: &lines)
    }

    /// Appends the lines of `block`, which ends with `\n`.
    private mutating func cut(_ block: inout String, into lines: inout [Substring]) throws(LineTooLong) {
        // Offsets first (inside the storage), then the substrings.
        var bounds: [(start: Int, end: Int)] = []
        var failure: LineTooLong?
        let maximum = maximumLineLength
        let first = lineCount
        block.withUTF8 { utf8 in
            let base = UnsafeRawPointer(utf8.baseAddress!)
            var start = 0
            while start < utf8.count, let newline = memchr(base + start, 0x0A, utf8.count - start) {
                let position = UnsafeRawPointer(newline) - base
                var end = position
                if end > start && utf8[end - 1] == 0x0D { end -= 1 }
                if end - start > maximum {
                    failure = LineTooLong(line: first + bounds.count + 1)
                    return
                }
                bounds.append((start, end))
                start = position + 1
            }
        }
        if let failure { throw failure }
        lineCount += bounds.count
        let utf8 = block.utf8
        lines.reserveCapacity(lines.count + bounds.count)
        for (start, end) in bounds {
            let from = utf8.index(utf8.startIndex, offsetBy: start)
            let to = utf8.index(from, offsetBy: end - start)
            lines.append(block[from..<to])
        }
    }
}
