#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOSources

/// `chunks(follow:)` on file-system events: appends, truncation and
/// rotation handled as `tail -F` does, on both backends.
@Suite struct FollowTests {
    private func append(_ path: String, _ text: String) {
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o644)
        _ = write(fd, text, text.utf8.count)
        close(fd)
    }

    /// Reads chunks until `collected` ends with `suffix`.
    private func read(_ it: inout IOChannel.FollowedChunks.Iterator, into collected: inout String,
                      until suffix: String) async throws {
        while !collected.hasSuffix(suffix) {
            guard let chunk = try await it.next() else { return }
            collected += String(decoding: Array(chunk), as: UTF8.self)
        }
    }

    @Test(.timeLimit(.minutes(10)), arguments: allBackends)
    func appendsTruncationAndRotation(_ backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("app.log")
        append(path, "one\n")
        for kind in [IOChannel.Kind.random, .stream] {
            if kind == .stream { _ = truncate(path, 0); append(path, "one\n") }
            let channel = try IOChannel(kind: kind, path: FilePath(path), mode: .readOnly, queue: IOQueue(label: "f"),
                                        engine: engine)
            // A one-hour safety net: every change below is seen on its
            // file-system event, or the test hits its time limit. (Not a
            // wall-clock bound: under a sanitizer this task may wait minutes
            // for a cooperative thread at each await.)
            var it = channel.chunks(follow: true, pollInterval: .seconds(3600)).makeAsyncIterator()
            var text = ""
            try await read(&it, into: &text, until: "one\n")
            append(path, "two\n")
            try await read(&it, into: &text, until: "two\n")
            // Truncated: read again from the start.
            _ = truncate(path, 0)
            append(path, "three\n")
            try await read(&it, into: &text, until: "three\n")
            // Rotated: the old file's rest, then the new file.
            rename(path, path + ".1")
            append(path + ".1", "four\n")
            append(path, "five\n")
            try await read(&it, into: &text, until: "five\n")
            #expect(text == "one\ntwo\nthree\nfour\nfive\n", "\(kind)")
            unlink(path + ".1")
        }
    }

    @Test(arguments: allBackends)
    func cancellingTheTaskEndsTheWait(_ backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("quiet.log")
        append(path, "x")
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: IOQueue(label: "f"),
                                    engine: engine)
        let seen = Atomic<Int>(0)
        let task = Task {
            do {
                for try await _ in channel.chunks(follow: true, pollInterval: .seconds(30)) {
                    seen.add(1, ordering: .relaxed)
                }
            } catch {
                return error as? Errno
            }
            return nil
        }
        // Waits without blocking a thread of the cooperative pool (the task needs one).
        for _ in 0..<10_000 where seen.load(ordering: .relaxed) == 0 { try await Task.sleep(for: .milliseconds(1)) }
        try await Task.sleep(for: .milliseconds(20))
        task.cancel()
        let error = await task.value
        let count = seen.load(ordering: .relaxed)
        #expect(count == 1)
        #expect(error == .canceled)
    }
}
