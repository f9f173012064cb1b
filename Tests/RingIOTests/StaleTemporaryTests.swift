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

/// `IO.writeFile` killed with SIGKILL leaves its temporary file; the next
/// `IO.writeFile` to the same destination removes it (and only temporaries
/// whose creating process is gone).
@Suite("IO.writeFile: stale temporaries")
struct StaleTemporaryTests {
    @Test("a temporary left by a SIGKILLed writer is removed by the next writeFile", arguments: allBackends)
    func sigkilledWriterLeavesNothingForLong(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let target = dir.file("target")
        try writeFile(target, Array("old".utf8))
        let useRing = backend == .ioUring
        // The child writes 64 MiB with IO.writeFile and kills itself with
        // SIGKILL as soon as its temporary file exists.
        await #expect(processExitsWith: .signal(SIGKILL)) { [directory = dir.path as String, useRing = useRing as Bool] in
            let engine = try childEngine(useRing: useRing)
            spawnThread(name: "killer") {
                while true {
                    if (try? FileManagerless.list(directory))?.contains(where: { $0.hasPrefix(".target.ringio-") }) == true {
                        kill(getpid(), SIGKILL)
                    }
                    usleep(200)
                }
            }
            try await IO.writeFile(DataChunk(randomBytes(64 * MiB, seed: 26)), to: FilePath(directory + "/target"),
                                   engine: engine)
            // Not reached: the write takes longer than the killer needs.
            usleep(5_000_000)
        }
        let left = try FileManagerless.list(dir.path).filter { $0.hasPrefix(".target.ringio-") }
        #expect(left.count == 1, "the killed writer left \(left)")
        #expect(try readFile(target) == Array("old".utf8), "the killed writer changed the destination")
        // A temporary of a live process (this one) stays.
        let mine = try #require(IO.temporaryPath(beside: FilePath(target)))
        try writeFile(mine.string, [1, 2, 3])
        // A name that only looks like a temporary stays too.
        try writeFile(dir.file(".target.ringio-notapid"), [4])
        try await IO.writeFile(DataChunk(Array("new".utf8)), to: FilePath(target), engine: engine)
        #expect(try readFile(target) == Array("new".utf8))
        let after = try FileManagerless.list(dir.path).sorted()
        #expect(after == [".target.ringio-notapid", mine.lastComponent!.string, "target"].sorted(),
                "left after the next writeFile: \(after)")
        #expect(IO.removeStaleTemporaries(beside: FilePath(target)) == 0)
    }

    @Test("a file whose name is 255 bytes long is written and copied atomically (its temporary's name fits too)",
          arguments: allBackends)
    func longestNameGetsATemporaryThatFits(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        // 255 bytes, the most a name may have (NAME_MAX): 84 three-byte
        // characters and three ASCII ones.
        let name = String(repeating: "\u{20AC}", count: 84) + "abc"
        #expect(name.utf8.count == 255)
        let target = FilePath(dir.path).appending(name)
        try await IO.writeFile(DataChunk(Array("first".utf8)), to: target, engine: engine)
        try await IO.writeFile(DataChunk(Array("second".utf8)), to: target, engine: engine)
        #expect(try readFile(target.string) == Array("second".utf8))
        let temporary = try #require(IO.temporaryPath(beside: target))
        #expect(temporary.lastComponent!.string.utf8.count <= 255)
        // A tree copy with atomically: the batch's temporaries fit as well.
        let tree = FilePath(dir.path).appending("tree")
        #expect(mkdir(tree.string, 0o755) == 0)
        try writeFile(tree.appending(name).string, Array("leaf".utf8))
        let copy = FilePath(dir.path).appending("copy")
        try await IO.copyItem(from: tree, to: copy, options: IO.CopyOptions(atomically: true))
        #expect(try readFile(copy.appending(name).string) == Array("leaf".utf8))
        #expect(try FileManagerless.list(copy.string) == [name])
        #expect(IO.removeStaleTemporaries(beside: target) == 0)
    }

    @Test("writeFile lists a directory for stale temporaries once per process, not once per write", arguments: allBackends)
    func oneScanPerDirectory(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try await IO.writeFile(DataChunk(Array("a".utf8)), to: FilePath(dir.file("a")), engine: engine)
        // A temporary of a process that does not exist (beyond any pid_max), made after
        // the first write into the directory: later writes do not list the directory
        // again (a listing per write made n writes into one directory O(n²)).
        let stale = dir.file(".b.ringio-4194305-abc")
        try writeFile(stale, [1])
        for name in ["b", "c", "d"] {
            try await IO.writeFile(DataChunk(Array(name.utf8)), to: FilePath(dir.file(name)), engine: engine)
        }
        #expect(try FileManagerless.list(dir.path).contains(".b.ringio-4194305-abc"),
                "a later writeFile listed the directory again")
        #expect(try readFile(dir.file("b")) == Array("b".utf8))
        // On demand, it goes.
        #expect(IO.removeStaleTemporaries(beside: FilePath(dir.file("b"))) == 1)
        #expect(try !FileManagerless.list(dir.path).contains(".b.ringio-4194305-abc"))
    }
}
