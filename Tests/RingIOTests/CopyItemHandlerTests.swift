#if DEBUG
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOBase

/// `IO.copyItem(from:to:options:onEntry:onError:)`: the caller's say on
/// each entry (copy, skip, copied by the caller) and on each failure (stop,
/// or go on without the entry), `CopyOptions.followSymlinks` and
/// `maximumConcurrentCopies`. On `IOEngine.shared`: the suite runs on both
/// backends as the whole target does (`RINGIO_BACKEND=threadpool`).
@Suite("copyItem with entry and error handlers")
struct CopyItemHandlerTests {
    /// The entries a handler saw, in the order it saw them.
    final class Seen: Sendable {
        let entries = Locked<[IO.CopyItemEntry]>([])
        let errors = Locked<[IOError]>([])
        func add(_ entry: IO.CopyItemEntry) { entries.withLock { $0.append(entry) } }
        var all: [IO.CopyItemEntry] { entries.withLock { $0 } }
        func entry(_ path: String) -> IO.CopyItemEntry? { all.first { $0.source.string == path } }
    }

    /// src/{a, b/{c, d/e}, link -> a, skipme/{x, y/z}}
    static func makeTree(_ dir: TemporaryDirectory) {
        Tree.mkdir(dir.file("src"))
        Tree.touch(dir.file("src/a"), "a")
        Tree.mkdir(dir.file("src/b"))
        Tree.touch(dir.file("src/b/c"), "c")
        Tree.mkdir(dir.file("src/b/d"))
        Tree.touch(dir.file("src/b/d/e"), "e")
        Tree.symlink("a", dir.file("src/link"))
        Tree.mkdir(dir.file("src/skipme"))
        Tree.touch(dir.file("src/skipme/x"), "x")
        Tree.mkdir(dir.file("src/skipme/y"))
        Tree.touch(dir.file("src/skipme/y/z"), "z")
    }

    @Test("onEntry sees every entry once with both paths and its type, the top first, each directory before its entries; .skip leaves a file or a whole directory out")
    func entriesAndSkip() async throws {
        let dir = TemporaryDirectory()
        Self.makeTree(dir)
        let seen = Seen()
        let (src, dst) = (dir.file("src"), dir.file("dst"))
        try await IO.copyItem(from: FilePath(src), to: FilePath(dst), onEntry: { entry in
            seen.add(entry)
            let name = entry.source.lastComponent?.string
            return name == "skipme" || name == "c" ? .skip : .copy
        })
        let entries = seen.all
        // skipme's entries are never offered: src, a, b, c, d, e, link, skipme.
        #expect(entries.count == 8, "\(entries.map(\.source))")
        #expect(Set(entries.map(\.source.string)).count == entries.count, "each once")
        #expect(entries.first?.source.string == src && entries.first?.isTop == true)
        #expect(entries.dropFirst().allSatisfy { !$0.isTop })
        for entry in entries {
            var relative = entry.source
            _ = relative.removePrefix(FilePath(src))
            #expect(entry.destination == FilePath(dst).appending(relative.components), "\(entry)")
        }
        #expect(seen.entry(src + "/b")?.type == .directory)
        #expect(seen.entry(src + "/b/d/e")?.type == .regular)
        #expect(seen.entry(src + "/link")?.type == .symlink)
        let order = entries.map(\.source.string)
        #expect(order.firstIndex(of: src + "/b")! < order.firstIndex(of: src + "/b/d")!)
        #expect(order.firstIndex(of: src + "/b/d")! < order.firstIndex(of: src + "/b/d/e")!)
        let copy = try await listing(dst, recursive: true)
        #expect(Set(copy.keys) == Set(["a", "b", "b/d", "b/d/e", "link"].map { dst + "/" + $0 }), "\(copy)")
        #expect(try readFile(dir.file("dst/b/d/e")) == Array("e".utf8))
    }

    @Test(".copied: the handler did it; the copy writes nothing there, and visits a directory's entries without setting anything on it")
    func copiedByHandler() async throws {
        let dir = TemporaryDirectory()
        Self.makeTree(dir)
        let (src, dst) = (dir.file("src"), dir.file("dst"))
        try await IO.copyItem(from: FilePath(src), to: FilePath(dst), onEntry: { entry in
            switch entry.source.lastComponent?.string {
            case "a":
                // Written by the handler: the copy must not replace it.
                Tree.touch(entry.destination.string, "mine")
                return .copied
            case "b":
                precondition(Glibc.mkdir(entry.destination.string, 0o700) == 0)
                return .copied
            default:
                return .copy
            }
        })
        #expect(try readFile(dir.file("dst/a")) == Array("mine".utf8))
        #expect(try readFile(dir.file("dst/b/d/e")) == Array("e".utf8), "b's entries were copied into the handler's b")
        #expect(try await IO.info(at: FilePath(dir.file("dst/b"))).permissions.rawValue == 0o700,
                "the handler's directory keeps the mode it was given")
        #expect(try await IO.info(at: FilePath(dir.file("dst/b/d"))).permissions
                == IO.info(at: FilePath(dir.file("src/b/d"))).permissions, "the copy's own directories take the source's")
    }

    @Test("onError .continue: a directory that cannot be read is reported once by name and left out; the rest is copied; .stop throws it")
    func continueAfterUnreadableDirectory() async throws {
        let dir = TemporaryDirectory()
        Self.makeTree(dir)
        let (src, dst) = (dir.file("src"), dir.file("dst"))
        // As root a mode of 0 would not stop the walk: the seam refuses the open instead.
        let eacces = Syscall.Mock.inject(.openat, errno: .permissionDenied, times: 1,
                                         scope: .files(under: FilePath(dir.file("src/b/d"))))
        defer { eacces.remove() }
        let seen = Seen()
        try await IO.copyItem(from: FilePath(src), to: FilePath(dst), onEntry: { _ in .copy }, onError: { error in
            seen.errors.withLock { $0.append(error) }
            return .continue
        })
        #expect(eacces.fired == 1)
        let errors = seen.errors.withLock { $0 }
        #expect(errors.count == 1, "\(errors)")
        #expect(errors.first?.errno == .permissionDenied && errors.first?.side == .source
                && errors.first?.path?.string == dir.file("src/b/d"), "\(errors)")
        let copy = try await listing(dst, recursive: true)
        for name in ["a", "b/c", "b/d", "link", "skipme/x", "skipme/y/z"] {
            #expect(copy[dst + "/" + name] != nil, "\(name) copied: \(copy.keys.sorted())")
        }
        #expect(copy[dst + "/b/d/e"] == nil)

        // The same failure with .stop: thrown, naming the directory.
        let again = Syscall.Mock.inject(.openat, errno: .permissionDenied, times: 1,
                                        scope: .files(under: FilePath(dir.file("src/b/d"))))
        defer { again.remove() }
        let error = await #expect(throws: IOError.self) {
            try await IO.copyItem(from: FilePath(src), to: FilePath(dir.file("dst2")), onEntry: { _ in .copy },
                                  onError: { _ in .stop })
        }
        #expect(error?.errno == .permissionDenied && error?.path?.string == dir.file("src/b/d"))
    }

    @Test("onError .continue: a missing source is reported, and the copy returns; a file that fails is reported and the others copied")
    func continueAfterFailedEntries() async throws {
        let dir = TemporaryDirectory()
        let seen = Seen()
        try await IO.copyItem(from: FilePath(dir.file("nothing")), to: FilePath(dir.file("dst")),
                              onEntry: { _ in .copy }, onError: { error in
            seen.errors.withLock { $0.append(error) }
            return .continue
        })
        var errors = seen.errors.withLock { $0 }
        #expect(errors.count == 1 && errors.first?.errno == .noSuchFileOrDirectory && errors.first?.side == .source)

        Self.makeTree(dir)
        seen.errors.withLock { $0 = [] }
        // Something not a directory where b's copy goes: b and its entries fail, the rest is copied.
        Tree.mkdir(dir.file("dst"))
        Tree.touch(dir.file("dst/b"), "in the way")
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")),
                              onEntry: { _ in .copy }, onError: { error in
            seen.errors.withLock { $0.append(error) }
            return .continue
        })
        errors = seen.errors.withLock { $0 }
        #expect(errors.count == 1, "b fails once, its entries are not tried: \(errors)")
        #expect(errors.first?.errno == .fileExists && errors.first?.path?.string == dir.file("dst/b"), "\(errors)")
        #expect(try readFile(dir.file("dst/skipme/y/z")) == Array("z".utf8))
        #expect(try readFile(dir.file("dst/b")) == Array("in the way".utf8))
    }

    @Test("followSymlinks: .never copies links as links, .source follows only the top, .always copies what each names")
    func followSymlinks() async throws {
        let dir = TemporaryDirectory()
        Self.makeTree(dir)
        Tree.symlink("b", dir.file("src/dirlink"))
        Tree.symlink("src", dir.file("top"))
        var options = IO.CopyOptions()

        try await IO.copyItem(from: FilePath(dir.file("top")), to: FilePath(dir.file("never")), options: options)
        #expect(try await IO.info(at: FilePath(dir.file("never")), followingSymlinks: false).type == .symlink)

        options.followSymlinks = .source
        try await IO.copyItem(from: FilePath(dir.file("top")), to: FilePath(dir.file("source")), options: options)
        var copy = try await listing(dir.file("source"), recursive: true)
        #expect(copy[dir.file("source/link")] == .symlink && copy[dir.file("source/dirlink")] == .symlink, "\(copy)")

        options.followSymlinks = .always
        try await IO.copyItem(from: FilePath(dir.file("top")), to: FilePath(dir.file("always")), options: options)
        copy = try await listing(dir.file("always"), recursive: true)
        #expect(copy[dir.file("always/link")] == .regular, "\(copy)")
        #expect(copy[dir.file("always/dirlink")] == .directory && copy[dir.file("always/dirlink/d/e")] == .regular,
                "\(copy)")
        #expect(try readFile(dir.file("always/link")) == Array("a".utf8))
        #expect(!copy.values.contains(.symlink))
    }

    @Test("followSymlinks .always: a symlink to a directory that contains it fails with ELOOP naming it (the rest is copied); a dangling one with ENOENT")
    func followLoops() async throws {
        let dir = TemporaryDirectory()
        Self.makeTree(dir)
        Tree.symlink("..", dir.file("src/b/d/up"))      // to b: contains the link
        Tree.symlink("../..", dir.file("src/b/d/top"))  // to src: contains it too
        Tree.symlink("missing", dir.file("src/dangling"))
        var options = IO.CopyOptions()
        options.followSymlinks = .always
        let seen = Seen()
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")), options: options,
                              onEntry: { _ in .copy }, onError: { error in
            seen.errors.withLock { $0.append(error) }
            return .continue
        })
        let errors = seen.errors.withLock { $0 }.sorted { ($0.path?.string ?? "") < ($1.path?.string ?? "") }
        #expect(errors.map { $0.path?.string } == [dir.file("src/b/d/top"), dir.file("src/b/d/up"), dir.file("src/dangling")],
                "\(errors)")
        #expect(errors.map(\.errno) == [.tooManySymbolicLinkLevels, .tooManySymbolicLinkLevels, .noSuchFileOrDirectory])
        #expect(try readFile(dir.file("dst/b/d/e")) == Array("e".utf8))
        #expect(try readFile(dir.file("dst/link")) == Array("a".utf8))
        // Without a handler the loop ends the copy.
        Tree.mkdir(dir.file("loopy"))
        Tree.mkdir(dir.file("loopy/sub"))
        Tree.symlink("..", dir.file("loopy/sub/back"))
        let error = await #expect(throws: IOError.self) {
            try await IO.copyItem(from: FilePath(dir.file("loopy")), to: FilePath(dir.file("dst2")), options: options)
        }
        #expect(error?.errno == .tooManySymbolicLinkLevels && error?.side == .source
                && error?.path?.string == dir.file("loopy/sub/back"), "\(String(describing: error))")
    }

    @Test("maximumConcurrentCopies bounds the handlers running at once: 1 runs them one at a time, in the listing's order")
    func concurrencyBound() async throws {
        let dir = TemporaryDirectory()
        Tree.mkdir(dir.file("src"))
        _ = Tree.make(dir.file("src"), directories: 3, files: 20)
        for width in [1, 3] {
            var options = IO.CopyOptions()
            options.maximumConcurrentCopies = width
            let running = Atomic(0)
            let peak = Atomic(0)
            try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst\(width)")),
                                  options: options, onEntry: { entry in
                // With 1, a directory's call waits for the file before it too.
                guard entry.type == .regular || width == 1 else { return .copy }
                let now = running.add(1, ordering: .sequentiallyConsistent).newValue
                peak.max(now, ordering: .sequentiallyConsistent)
                try? await Task.sleep(for: .milliseconds(1))
                running.subtract(1, ordering: .sequentiallyConsistent)
                return .copy
            })
            #expect(peak.load(ordering: .sequentiallyConsistent) <= width, "width \(width)")
            #expect(try await listing(dir.file("dst\(width)"), recursive: true).count == 63)
        }
    }
}
#endif
