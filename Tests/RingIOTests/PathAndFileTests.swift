#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase

/// Runs `body` with the current directory set to `directory`, then restores it.
/// Only this suite changes the current directory, and it runs serialized; the
/// rest of the tests use absolute paths (the ringcp tests give their child
/// processes an explicit directory).
private func inDirectory<T>(_ directory: String, _ body: () async throws -> T) async throws -> T {
    let saved = try #require(getcwd(nil, 0))
    defer {
        _ = chdir(saved)
        free(saved)
    }
    try #require(chdir(directory) == 0)
    return try await body()
}

/// Polls `condition` without blocking a thread; false after 10 s.
private func eventually(_ condition: () -> Bool) async -> Bool {
    for _ in 0..<2000 {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return condition()
}

@Suite("Paths: relative paths, IOError, readFile limits", .serialized)
struct PathAndFileTests {
    @Test("a relative path names the file in the directory current at creation; one-shots resolve at the call",
          arguments: allBackends)
    func relativePaths(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        try writeFile(a.file("f"), Array("in a".utf8))
        try writeFile(b.file("f"), Array("in b".utf8))
        let channel = try await inDirectory(a.path) {
            try IOChannel(kind: .stream, path: "f", mode: .readOnly, queue: .global, engine: engine)
        }
        #expect(channel.path == FilePath(a.path).appending("f"))
        try await inDirectory(b.path) {
            // The channel still reads a's file after the chdir.
            let bytes = try await channel.read(length: .max)
            #expect(String(decoding: bytes, as: UTF8.self) == "in a")
            // The one-shots resolve against b, the directory now.
            let now = try await IO.readFile(at: "f", engine: engine)
            #expect(String(decoding: now, as: UTF8.self) == "in b")
            try await IO.writeFile(DataChunk("written".utf8), to: "g", engine: engine)
            try await IO.copyFile(from: "f", to: "h", engine: engine)
            let sub = try IOChannel(kind: .random, path: "./g", mode: .readOnly, queue: .global, engine: engine)
            let written = try await sub.read(length: .max)
            #expect(String(decoding: written, as: UTF8.self) == "written")
        }
        #expect(try readFile(b.file("g")) == Array("written".utf8))
        #expect(try readFile(b.file("h")) == Array("in b".utf8))
        #expect(access(a.file("g"), F_OK) != 0)
    }

    @Test("an empty path throws IOError with EINVAL, matched by its errno", arguments: allBackends)
    func emptyPath(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        do {
            _ = try IOChannel(kind: .stream, path: "", mode: .readOnly, queue: .global, engine: engine)
            Issue.record("an empty path did not throw")
        } catch Errno.invalidArgument {
        } catch {
            Issue.record("unexpected \(error)")
        }
        do {
            _ = try await IO.readFile(at: "", engine: engine)
            Issue.record("readFile of an empty path did not throw")
        } catch {
            #expect(error.errno == .invalidArgument)
            #expect(error.operation == .openForReading)
        }
        await #expect(throws: IOError.self) { try await IO.writeFile([1], to: "", engine: engine) }
    }

    @Test("readFile of a missing file says which file, what failed and the errno", arguments: allBackends)
    func missingFile(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let missing = dir.file("missing")
        do {
            _ = try await IO.readFile(at: FilePath(missing), engine: engine)
            Issue.record("no error")
        } catch Errno.noSuchFileOrDirectory {
        } catch {
            Issue.record("unexpected \(error)")
        }
        do {
            _ = try await IO.readFile(at: FilePath(missing), engine: engine)
        } catch {
            #expect(error.description == "Unable to open '\(missing)' for reading: No such file or directory (ENOENT)")
            #expect(error.path == FilePath(missing))
        }
        // writeFile into a missing directory: the open of its new file fails.
        do {
            try await IO.writeFile([1, 2, 3], to: FilePath(dir.file("no/such")), engine: engine)
            Issue.record("no error")
        } catch {
            #expect(error.operation == .openForWriting)
            #expect(error.errno == .noSuchFileOrDirectory)
            #expect(error.path?.removingLastComponent() == FilePath(dir.file("no")))
        }
    }

    @Test("a path channel's open failure: bare Errno to cleanup and handlers, the whole story in openError",
          arguments: allBackends)
    func channelOpenError(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let missing = dir.file("missing")
        let latch = Latch()
        let seen = Locked<Errno?>(nil)
        let channel = try IOChannel(kind: .stream, path: FilePath(missing), mode: .readOnly, queue: .global,
                                    engine: engine) { error in
            seen.withLock { $0 = error }
            latch.signal()
        }
        await #expect(throws: Errno.noSuchFileOrDirectory) { _ = try await channel.read(length: 1) }
        #expect(latch.wait())
        #expect(seen.withLock { $0 } == .noSuchFileOrDirectory)
        #expect(channel.openError?.description
                == "Unable to open '\(missing)' for reading: No such file or directory (ENOENT)")
        let fine = try IOChannel(kind: .stream, path: FilePath(dir.path), mode: .readOnly, queue: .global,
                                 engine: engine)
        await #expect(throws: Errno.isDirectory) { _ = try await fine.read(length: 1) }
        #expect(fine.openError?.errno == .isDirectory)
        let fd = IOChannel(kind: .stream, fileDescriptor: .standardInput, queue: .global, engine: engine)
        #expect(fd.openError == nil && fd.path == nil)
        fd.close()
    }

    @Test("readFile stops at maximumSize with EFBIG: /dev/zero and a file one byte too large",
          arguments: allBackends)
    func maximumSize(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(100, seed: 181)
        try writeFile(dir.file("f"), bytes)
        #expect(Array(try await IO.readFile(at: FilePath(dir.file("f")), maximumSize: 100, engine: engine)) == bytes)
        do {
            _ = try await IO.readFile(at: FilePath(dir.file("f")), maximumSize: 99, engine: engine)
            Issue.record("no error")
        } catch {
            #expect(error.errno == .fileTooLarge)
            #expect(error.description.hasSuffix("File too large (EFBIG): more than the maximum size of 99 bytes"))
        }
        do {
            _ = try await IO.readFile(at: "/dev/zero", maximumSize: 1 << 20, engine: engine)
            Issue.record("no error")
        } catch {
            #expect(error.errno == .fileTooLarge && error.operation == .read)
        }
        try writeFile(dir.file("empty"), [])
        #expect(try await IO.readFile(at: FilePath(dir.file("empty")), maximumSize: 0, engine: engine).isEmpty)
    }

    @Test("chunks(follow:) reads what is appended after the end, until the task is cancelled",
          arguments: allBackends, [IOChannel.Kind.stream, .random])
    func follow(backend: IOEngine.Backend, kind: IOChannel.Kind) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("log"), Array("one\n".utf8))
        let appender = try openFile(dir.file("log"), .writeOnly)
        defer { try? appender.close() }
        _ = lseek(appender.rawValue, 0, SEEK_END)
        let channel = try IOChannel(kind: kind, path: FilePath(dir.file("log")), mode: .readOnly, queue: .global,
                                    engine: engine)
        let received = Locked<[UInt8]>([])
        let reader = Task { () -> Errno? in
            do throws(Errno) {
                for try await chunk in channel.chunks(follow: true, pollInterval: .milliseconds(5)) {
                    received.withLock { $0 += Array(chunk) }
                }
                return nil
            } catch {
                return error
            }
        }
        #expect(await eventually { received.withLock { $0 } == Array("one\n".utf8) })
        for line in ["two\n", "three\n"] {
            _ = try appender.writeAll(Array(line.utf8))
            #expect(await eventually { String(decoding: received.withLock { $0 }, as: UTF8.self).hasSuffix(line) })
        }
        #expect(String(decoding: received.withLock { $0 }, as: UTF8.self) == "one\ntwo\nthree\n")
        reader.cancel()
        #expect(await reader.value == Errno.canceled)
    }

    @Test("chunks(follow: false) ends at the end of the file (it used to trap)", arguments: allBackends)
    func followFalse(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(3000, seed: 91)
        try writeFile(dir.file("log"), bytes)
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("log")), mode: .readOnly, queue: .global,
                                    engine: engine)
        defer { channel.close() }
        var received: [UInt8] = []
        for try await chunk in channel.chunks(follow: false) { received += Array(chunk) }
        #expect(received == bytes)
    }
}
