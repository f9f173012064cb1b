#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) import RingIO
@testable import RingIOEngine

/// `IO.lines(at:)` and `IOChannel.lines()` on real files, both backends.
@Suite("Lines")
struct LinesTests {
    func lines(_ path: String, engine: IOEngine, maximum: Int = IO.defaultMaximumLineLength) async throws(IOError) -> [String] {
        var all: [String] = []
        for try await line in IO.lines(at: FilePath(path), maximumLineLength: maximum, engine: engine) {
            all.append(String(line))
        }
        return all
    }

    @Test("\\n and \\r\\n, empty lines, a last line without a newline, an empty file", arguments: allBackends)
    func endings(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("a"), "one\ntwo\r\n\nthree\r\n\r\nlast")
        #expect(try await lines(dir.file("a"), engine: engine) == ["one", "two", "", "three", "", "last"])
        Tree.touch(dir.file("b"), "x\n")
        #expect(try await lines(dir.file("b"), engine: engine) == ["x"])
        Tree.touch(dir.file("empty"))
        #expect(try await lines(dir.file("empty"), engine: engine) == [])
        Tree.touch(dir.file("cr"), "a\rb\n")
        #expect(try await lines(dir.file("cr"), engine: engine) == ["a\rb"])
    }

    @Test("a file of only newlines; \\r\\n across the 1 MiB read boundary", arguments: allBackends)
    func newlinesAndBoundaries(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("newlines"), String(repeating: "\n", count: 100_000))
        #expect(try await lines(dir.file("newlines"), engine: engine) == Array(repeating: "", count: 100_000))
        Tree.touch(dir.file("crlf"), String(repeating: "\r\n", count: 1000))
        #expect(try await lines(dir.file("crlf"), engine: engine) == Array(repeating: "", count: 1000))
        // "\r" the last byte of the first MiB, "\n" the first of the second.
        for size in [256 << 10, 1 << 20] {
            let first = String(repeating: "a", count: size - 1)
            Tree.touch(dir.file("split"), first + "\r\nb\r\n")
            #expect(try await lines(dir.file("split"), engine: engine) == [first, "b"], "at \(size)")
        }
    }

    @Test("IOChannel.lines() of a pipe: lines as they arrive; \\r\\n split between two reads", arguments: allBackends)
    func pipeLines(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: .global, engine: engine)
        defer {
            channel.close(stop: true)
            pipe.closeAll()
        }
        _ = try pipe.writer.writeAll(Array("a\nb\r".utf8))
        var lines = channel.lines().makeAsyncIterator()
        // "a" out: the read of "a\nb\r" is in, and its "\r" waits for what follows.
        #expect(try await lines.next() == "a")
        _ = try pipe.writer.writeAll(Array("\nc\r\n".utf8))
        #expect(try await lines.next() == "b")
        #expect(try await lines.next() == "c")
    }

    @Test("200,000 lines of varied lengths across many chunks: the same as splitting the text", arguments: allBackends)
    func manyLines(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        var text = ""
        var expected: [String] = []
        for i in 0..<200_000 {
            let line = String(repeating: "é", count: i % 37) + "\(i)"
            expected.append(line)
            text += line + (i % 3 == 0 ? "\r\n" : "\n")
        }
        Tree.touch(dir.file("text"), text)
        #expect(try await lines(dir.file("text"), engine: engine) == expected)
    }

    @Test("a line longer than a chunk (3 MiB) is one line; past the maximum it fails with EOVERFLOW after the lines before", arguments: allBackends)
    func longLines(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let long = String(repeating: "0123456789abcdef", count: 3 << 16)
        Tree.touch(dir.file("long"), "first\n" + long + "\nafter")
        #expect(try await lines(dir.file("long"), engine: engine, maximum: 4 << 20) == ["first", long, "after"])
        var seen: [String] = []
        do {
            for try await line in IO.lines(at: FilePath(dir.file("long")), maximumLineLength: 1 << 20, engine: engine) {
                seen.append(String(line))
            }
            Issue.record("no error")
        } catch {
            #expect(error.errno == .overflow)
            #expect(error.path == FilePath(dir.file("long")))
            #expect("\(error)".contains("line 2 is longer than the maximum of 1048576 bytes"))
        }
        #expect(seen == ["first"])
        // No newline at all: the same, without holding the whole file.
        Tree.touch(dir.file("none"), long)
        #expect(await thrownErrno { _ = try await lines(dir.file("none"), engine: engine, maximum: 1000) } == .overflow)
        // Exactly the maximum, with \r\n: accepted.
        Tree.touch(dir.file("exact"), String(repeating: "y", count: 1000) + "\r\n")
        #expect(try await lines(dir.file("exact"), engine: engine, maximum: 1000).first?.count == 1000)
    }

    @Test("bytes that are not UTF-8 become U+FFFD; a missing file fails at the first next()", arguments: allBackends)
    func invalidAndMissing(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("bin"), [0x61, 0xFF, 0x0A, 0x62, 0x0A])
        #expect(try await lines(dir.file("bin"), engine: engine) == ["a\u{FFFD}", "b"])
        do {
            _ = try await lines(dir.file("missing"), engine: engine)
            Issue.record("no error")
        } catch {
            #expect(error.errno == .noSuchFileOrDirectory)
            #expect(error.operation == .openForReading)
        }
        // A path that cannot make a channel (empty): one error, then the end.
        var empty = IO.lines(at: "", engine: engine).makeAsyncIterator()
        do {
            _ = try await empty.next()
            Issue.record("no error")
        } catch {
            #expect(error.operation == .openForReading)
        }
        #expect(try await empty.next() == nil)
    }

    @Test("reads the engine's way (a fault rule in place: nothing read on the calling thread): the same lines; a failed read ends them with its errno", arguments: allBackends)
    func readsThroughTheEngine(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        var text = ""
        var expected: [String] = []
        for i in 0..<50_000 {
            let line = "line \(i) é"
            expected.append(line)
            text += line + (i % 2 == 0 ? "\r\n" : "\n")
        }
        Tree.touch(dir.file("text"), text)  // about 3 reads of 256 KiB
        // Three reads of one byte, then whole ones.
        engine.faults.add(.init(target: .reads, fault: .shorten, times: 3))
        #expect(try await lines(dir.file("text"), engine: engine) == expected)
        // The second read fails: the lines of the first, then its error.
        engine.faults.add(.init(target: .reads, fault: .fail(EIO), skip: 1, times: 1))
        var seen = 0
        do {
            for try await _ in IO.lines(at: FilePath(dir.file("text")), engine: engine) { seen += 1 }
            Issue.record("no error")
        } catch {
            #expect(error.errno == .ioError)
            #expect(error.operation == .read)
        }
        #expect(seen > 0 && seen < expected.count)
    }

    @Test("a multi-byte character and an invalid byte across the 256 KiB read boundary; a \\r\\n line of them", arguments: allBackends)
    func charactersAcrossReads(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let read = 256 << 10  // the size of each read of a regular file
        // "😀" starts 2 bytes before the boundary; then an 0xFF, "é" and "\r\n".
        let first = Array(repeating: UInt8(ascii: "a"), count: read - 2)
        let bytes = first + Array("😀".utf8) + [0xFF] + Array("é\r\nnext é\n".utf8)
        try writeFile(dir.file("split"), bytes)
        let expected = [String(repeating: "a", count: read - 2) + "😀\u{FFFD}é", "next é"]
        #expect(try await lines(dir.file("split"), engine: engine) == expected)
    }

    @Test("IOChannel.lines(): a channel's lines; the channel stays open", arguments: allBackends)
    func channelLines(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        Tree.touch(dir.file("t"), "a\nb\nc")
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("t")), mode: .readOnly, queue: .global,
                                    engine: engine)
        defer { channel.close() }
        var all: [Substring] = []
        for try await line in channel.lines() { all.append(line) }
        #expect(all == ["a", "b", "c"])
        #expect(try await channel.read(length: 1) == DataChunk("a".utf8))
    }
}
