import Testing
import RingIOData
import RingIOFiles

/// `LineSplitter` with no kernel: every split of the same bytes into
/// regions and chunks gives the same lines.
@Suite("LineSplitter")
struct LineSplitterTests {
    static let text = Array("alpha\r\nbeta\n\ngamma délta\r\n\r\nx\nlast line".utf8)
    static let expected = ["alpha", "beta", "", "gamma délta", "", "x", "last line"]

    func run(_ chunks: [DataChunk], maximum: Int = 1 << 20) throws(LineSplitter.LineTooLong) -> [String] {
        var splitter = LineSplitter(maximumLineLength: maximum)
        var lines: [Substring] = []
        for chunk in chunks { try splitter.split(chunk, into: &lines) }
        if let last = splitter.finish() { lines.append(last) }
        return lines.map(String.init)
    }

    @Test("every cut of the text into two chunks, and into one chunk of many regions")
    func everySplit() throws {
        let bytes = Self.text
        for cut in 0...bytes.count {
            let chunks = [DataChunk(bytes[..<cut]), DataChunk(bytes[cut...])]
            #expect(try run(chunks) == Self.expected, "cut at \(cut)")
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
    }
}
