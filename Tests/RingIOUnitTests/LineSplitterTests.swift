import Testing
import RingIOData
import RingIOFiles

/// `LineSplitter` with no kernel: every split of the same bytes into
/// regions and chunks gives the same lines.
@Suite("LineSplitter")
struct LineSplitterTests {
    static let text = Array("alpha\r\nbeta\n\ngamma délta\r\n\r\nx\nlast line".utf8)
    static let expected = ["alpha", "beta", "", "gamma délta", "", "x", "last line"]

    /// The lines of `chunks`: each chunk's lines taken before the next is
    /// added (as `IO.Lines` does), or (`drainEach: false`) all at the end.
    func run(_ chunks: [DataChunk], maximum: Int = 1 << 20, drainEach: Bool = true) throws(LineSplitter.LineTooLong) -> [String] {
        var splitter = LineSplitter(maximumLineLength: maximum)
        var lines: [String] = []
        for chunk in chunks {
            splitter.append(chunk)
            while drainEach, let line = try splitter.next() { lines.append(String(line)) }
        }
        splitter.finish()
        while let line = try splitter.next() { lines.append(String(line)) }
        return lines
    }

    @Test("every cut of the text into two chunks, and into one chunk of many regions")
    func everySplit() throws {
        let bytes = Self.text
        for cut in 0...bytes.count {
            let chunks = [DataChunk(bytes[..<cut]), DataChunk(bytes[cut...])]
            #expect(try run(chunks) == Self.expected, "cut at \(cut)")
            #expect(try run(chunks, drainEach: false) == Self.expected, "cut at \(cut), drained at the end")
            // One chunk whose regions are cut there and at every third byte.
            var regions = DataChunk()
            var start = 0
            for end in stride(from: 3, through: bytes.count, by: 3) + [bytes.count] where end > start {
                regions = regions + DataChunk(bytes[start..<end])
                start = end
            }
            #expect(try run([regions]) == Self.expected)
        }
    }

    @Test("one byte per chunk")
    func byteByByte() throws {
        #expect(try run(Self.text.map { DataChunk([$0]) }) == Self.expected)
        #expect(try run(Self.text.map { DataChunk([$0]) }, drainEach: false) == Self.expected)
    }

    @Test("\\r\\n split across two chunks is one line ending; a lone \\r stays in the line, and ends the last line as is")
    func crlfAcrossChunks() throws {
        #expect(try run([DataChunk("one\r".utf8), DataChunk("\ntwo\r".utf8), DataChunk("\n".utf8)]) == ["one", "two"])
        #expect(try run([DataChunk("a\r".utf8), DataChunk("b\n".utf8)]) == ["a\rb"])
        #expect(try run([DataChunk("end\r".utf8)]) == ["end\r"])
    }

    @Test("no input, empty chunks, and only newlines")
    func emptyAndNewlines() throws {
        #expect(try run([]) == [])
        #expect(try run([DataChunk(), DataChunk()]) == [])
        #expect(try run([DataChunk("\n\n\n".utf8)]) == ["", "", ""])
        #expect(try run([DataChunk("\r\n\n".utf8), DataChunk("\r".utf8), DataChunk("\n".utf8)]) == ["", "", ""])
        #expect(try run(Array(repeating: DataChunk("\n".utf8), count: 1000)) == Array(repeating: "", count: 1000))
    }

    @Test("one chunk of 10,000 lines (more than one scan of a block finds), \\n and \\r\\n")
    func manyLinesInOneBlock() throws {
        var text: [UInt8] = []
        var expected: [String] = []
        for i in 0..<10_000 {
            let line = i % 7 == 0 ? "" : "line \(i)"
            expected.append(line)
            text += Array(line.utf8) + (i % 3 == 0 ? [13, 10] : [10])
        }
        #expect(LineSplitter.scanLines < 10_000)
        #expect(try run([DataChunk(text)]) == expected)
        #expect(try run([DataChunk(text[..<50_001]), DataChunk(text[50_001...])]) == expected)
    }

    @Test("a failure ends the lines: nothing after it, and next() is nil from then on")
    func afterFailure() throws {
        var splitter = LineSplitter(maximumLineLength: 3)
        splitter.append(DataChunk("ab\nlong line\ncd\n".utf8))
        #expect(try splitter.next() == "ab")
        #expect(throws: LineSplitter.LineTooLong(line: 2)) { _ = try splitter.next() }
        #expect(try splitter.next() == nil)
        splitter.finish()
        #expect(try splitter.next() == nil)
    }

    @Test("the maximum: a line of exactly it passes (with \\r\\n split from it), one byte more fails naming the line")
    func maximum() throws {
        let line = Array(repeating: UInt8(ascii: "z"), count: 10)
        #expect(try run([DataChunk(line + [13]), DataChunk([10])], maximum: 10) == [String(repeating: "z", count: 10)])
        #expect(throws: LineSplitter.LineTooLong(line: 2)) {
            _ = try run([DataChunk(Array("ok\n".utf8) + line + [UInt8(ascii: "z"), 10])], maximum: 10)
        }
        #expect(throws: LineSplitter.LineTooLong(line: 1)) {
            _ = try run([DataChunk(line), DataChunk(line)], maximum: 10)
        }
        // The lines before a carried line that passes the maximum come out first.
        var splitter = LineSplitter(maximumLineLength: 10)
        splitter.append(DataChunk(Array("a\nb\n".utf8) + line))
        splitter.append(DataChunk(line))
        #expect(try splitter.next() == "a")
        #expect(try splitter.next() == "b")
        #expect(throws: LineSplitter.LineTooLong(line: 3)) { _ = try splitter.next() }
        // A last line (no newline) past the maximum fails too.
        #expect(throws: LineSplitter.LineTooLong(line: 1)) {
            _ = try run([DataChunk(line + [13])], maximum: 10)
        }
    }

    @Test("10,000 lines of non-ASCII and invalid bytes, \\n and \\r\\n, over more than one scan: each line as String(decoding:as:) gives it")
    func nonASCIIAcrossScans() throws {
        let pieces: [[UInt8]] = [Array("é".utf8), Array("😀".utf8), [0xFF], [0xC3], Array("plain".utf8), [], Array("\r".utf8)]
        var text: [UInt8] = []
        var expected: [String] = []
        for i in 0..<10_000 {
            var line = Array("\(i)".utf8)
            for j in 0..<(i % 5) { line += pieces[(i + j) % pieces.count] }
            if line.last == 0x0D { line.append(UInt8(ascii: "x")) }  // a "\r" last would join the "\r\n"
            expected.append(String(decoding: line, as: UTF8.self))
            text += line + (i % 3 == 0 ? [13, 10] : [10])
        }
        #expect(try run([DataChunk(text)]) == expected)
        #expect(try run([DataChunk(text[..<33_333]), DataChunk(text[33_333...])]) == expected)
        // Cut inside a multi-byte character: its bytes join again in the carry.
        let cut = text.firstIndex(of: 0xF0)! + 2
        #expect(try run([DataChunk(text[..<cut]), DataChunk(text[cut...])]) == expected)
    }

    @Test("a line past the maximum right after a scan's last line, and inside a later scan: the lines before it, then the failure")
    func maximumAtScanBoundary() throws {
        let long = Array(repeating: UInt8(ascii: "z"), count: 11)
        for before in [LineSplitter.scanLines - 1, LineSplitter.scanLines, LineSplitter.scanLines + 1, 2 * LineSplitter.scanLines + 7] {
            var splitter = LineSplitter(maximumLineLength: 10)
            var text: [UInt8] = []
            for i in 0..<before { text += Array("l\(i % 10)".utf8) + (i % 2 == 0 ? [13, 10] : [10]) }
            splitter.append(DataChunk(text + long + [13, 10] + Array("after\n".utf8)))
            var count = 0
            do throws(LineSplitter.LineTooLong) {
                while let line = try splitter.next() {
                    #expect(line == "l\(count % 10)")
                    count += 1
                }
                Issue.record("no failure after \(count) lines")
            } catch {
                #expect(error == LineSplitter.LineTooLong(line: before + 1))
            }
            #expect(count == before)
            #expect(try splitter.next() == nil)
        }
    }

    /// The lines of `text` read with `appendReading`, `piece` bytes a read
    /// (every other read through `append` when `mixed`).
    func runReading(_ text: [UInt8], piece: Int, maximum: Int = 1 << 20, mixed: Bool = false) throws(LineSplitter.LineTooLong) -> [String] {
        var splitter = LineSplitter(maximumLineLength: maximum)
        var lines: [String] = []
        var offset = 0, reads = 0
        while true {
            let end = Swift.min(offset + piece, text.count)
            reads += 1
            if mixed && reads % 2 == 0 {
                if offset == text.count { break }
                splitter.append(DataChunk(text[offset..<end]))
                offset = end
            } else {
                let read = splitter.appendReading(upTo: piece) { buffer in
                    #expect(buffer.count == piece)
                    let count = end - offset
                    text.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<end])) }
                    return count
                }
                guard let read else { break }  // past a line too long: the lines say so
                offset += read
                if read == 0 { break }
            }
            while let line = try splitter.next() { lines.append(String(line)) }
        }
        splitter.finish()
        while let line = try splitter.next() { lines.append(String(line)) }
        return lines
    }

    @Test("appendReading: the text read into the blocks' storage in pieces of every size, alone and between appends, gives the same lines")
    func readingIntoBlocks() throws {
        let bytes = Self.text
        for piece in 1...bytes.count + 1 {
            #expect(try runReading(bytes, piece: piece) == Self.expected, "pieces of \(piece)")
            #expect(try runReading(bytes, piece: piece, mixed: true) == Self.expected, "pieces of \(piece), mixed")
        }
        var many: [UInt8] = []
        var expected: [String] = []
        for i in 0..<10_000 {
            let line = i % 11 == 0 ? "" : "é line \(i)"
            expected.append(line)
            many += Array(line.utf8) + (i % 4 == 0 ? [13, 10] : [10])
        }
        #expect(try runReading(many, piece: 256 << 10) == expected)
        #expect(try runReading(many, piece: 4093, mixed: true) == expected)
    }

    @Test("appendReading: a read that cannot read now changes nothing; a line past the maximum fails as with append")
    func readingFallbackAndMaximum() throws {
        var splitter = LineSplitter(maximumLineLength: 10)
        splitter.append(DataChunk("one\ntw".utf8))
        #expect(splitter.appendReading(upTo: 64) { _ in nil } == nil)
        #expect(splitter.appendReading(upTo: 64) { buffer in
            Array("o\r".utf8).withUnsafeBytes { buffer.copyMemory(from: $0) }
            return 2
        } == 2)
        splitter.append(DataChunk("\nthree".utf8))
        #expect(try splitter.next() == "one")
        #expect(try splitter.next() == "two")
        #expect(try splitter.next() == nil)
        #expect(splitter.appendReading(upTo: 64) { _ in 0 } == 0)
        splitter.finish()
        #expect(try splitter.next() == "three")
        #expect(try splitter.next() == nil)
        // No newline in 11 bytes read 4 at a time: the line is too long.
        let long = Array(repeating: UInt8(ascii: "z"), count: 11)
        #expect(throws: LineSplitter.LineTooLong(line: 2)) {
            _ = try runReading(Array("ok\n".utf8) + long + [10], piece: 4, maximum: 10)
        }
        #expect(throws: LineSplitter.LineTooLong(line: 1)) {
            _ = try runReading(long, piece: 11, maximum: 10)
        }
    }
}
