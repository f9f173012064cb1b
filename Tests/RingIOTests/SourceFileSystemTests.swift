#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOBase
@testable import RingIOSources
@testable import RingIOEngine

/// File-system sources (after libdispatch's tests/dispatch_vnode.c, written
/// anew), on io_uring, io_uring as an old kernel, and the thread pool.
@Suite struct SourceFileSystemTests {
    typealias Event = IOFileSystemSource.Event

    /// A source on `path` (opened here, closed by its cancel handler),
    /// recording into `log`, activated and registered.
    private func activeSource(path: String, events: Event, engine: IOEngine, log: SourceLog) -> IOFileSystemSource {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        #expect(fd >= 0)
        let source = IOFileSystemSource(fileDescriptor: FileDescriptor(rawValue: fd), events: events,
                                        queue: IOQueue(label: "fs"), engine: engine)
        log.attach(source)
        source.setCancelHandler {
            close(fd)
            log.cancelled.signal()
        }
        source.activate()
        #expect(waitUntil { log.registrations.load(ordering: .relaxed) == 1 })
        return source
    }

    /// The events seen, ORed, once `expected` are all there (or the timeout).
    private func watch(_ variant: SourceEngine, path: String, events: Event = .all,
                       _ change: () -> Void, then second: (() -> Void)? = nil,
                       expect expected: Event) throws -> Event {
        let engine = try variant.make()
        let log = SourceLog()
        let source = activeSource(path: path, events: events, engine: engine, log: log)
        change()
        let seen = { Event(rawValue: log.deliveries.withLock { $0.reduce(0, |) }) }
        if let second {
            // The first change delivered before the second is made (two
            // read in one batch would merge).
            _ = waitUntil(timeout: .seconds(20)) { !seen().isEmpty }
            second()
        }
        _ = waitUntil(timeout: .seconds(20)) { seen().isSuperset(of: expected) }
        milliseconds(20)
        source.cancel()
        #expect(log.cancelled.wait())
        return seen()
    }

    @Test(arguments: SourceEngine.tested)
    func writeAndExtend(_ variant: SourceEngine) throws {
        let dir = TemporaryDirectory()
        let path = dir.file("f")
        #expect(creat(path, 0o644) >= 0)
        let seen = try watch(variant, path: path, {
            let w = open(path, O_WRONLY | O_APPEND)
            _ = write(w, "hello", 5)
            close(w)
        }, expect: [.write, .extend])
        #expect(seen == [.write, .extend])
    }

    @Test(arguments: SourceEngine.tested)
    func overwriteInPlaceIsWriteWithoutExtend(_ variant: SourceEngine) throws {
        let dir = TemporaryDirectory()
        let path = dir.file("f")
        let c = creat(path, 0o644)
        _ = write(c, "0123456789", 10)
        close(c)
        let seen = try watch(variant, path: path, {
            let w = open(path, O_WRONLY)
            _ = pwrite(w, "ab", 2, 3)
            close(w)
        }, expect: .write)
        #expect(seen == .write)
    }

    @Test(arguments: SourceEngine.tested)
    func attribLinkRenameDelete(_ variant: SourceEngine) throws {
        let dir = TemporaryDirectory()
        let path = dir.file("f")
        close(creat(path, 0o644))
        #expect(try watch(variant, path: path, { chmod(path, 0o600) }, expect: .attrib) == .attrib)
        // Linking and unlinking a second name: `.link` only. (The unlink
        // waits for the link's delivery: a link and an unlink read in one
        // batch leave the count as it was, and the source can only compare
        // counts: see IOFileSystemSource. A 20 ms pause was not enough
        // under ThreadSanitizer on a loaded machine.)
        #expect(try watch(variant, path: path, { link(path, dir.file("g")) },
                          then: { unlink(dir.file("g")) }, expect: .link) == .link)
        #expect(try watch(variant, path: path, { rename(path, dir.file("h")) }, expect: .rename).contains(.rename))
        // The file deleted under the source: `.delete`, and the source still
        // cancels cleanly (its fd is closed in the cancel handler).
        let deleted = try watch(variant, path: dir.file("h"), { unlink(dir.file("h")) }, expect: .delete)
        #expect(deleted.contains(.delete))
    }

    @Test(arguments: SourceEngine.tested)
    func directoryReportsWriteForEntries(_ variant: SourceEngine) throws {
        let dir = TemporaryDirectory()
        let seen = try watch(variant, path: dir.path, events: [.write], {
            close(creat(dir.file("new"), 0o644))
        }, expect: .write)
        #expect(seen == .write)
    }

    @Test(arguments: SourceEngine.tested)
    func onlyRequestedEvents(_ variant: SourceEngine) throws {
        let dir = TemporaryDirectory()
        let path = dir.file("f")
        close(creat(path, 0o644))
        let seen = try watch(variant, path: path, events: [.delete], {
            chmod(path, 0o600)
            let w = open(path, O_WRONLY | O_APPEND)
            _ = write(w, "x", 1)
            close(w)
            unlink(path)
        }, expect: .delete)
        #expect(seen == .delete)
    }

    /// A file's `.write` source on `engine`, and a change that should reach it.
    private func expectDelivery(on engine: IOEngine, in dir: TemporaryDirectory, name: String) -> Bool {
        let path = dir.file(name)
        close(creat(path, 0o644))
        let log = SourceLog()
        let source = activeSource(path: path, events: [.write], engine: engine, log: log)
        let w = open(path, O_WRONLY | O_APPEND)
        _ = write(w, "x", 1)
        close(w)
        let seen = waitUntil(timeout: .seconds(20)) { log.count > 0 }
        source.cancel()
        #expect(log.cancelled.wait())
        return seen
    }

    #if DEBUG
    @Test(arguments: SourceEngine.tested)
    func watchLimitIsAClearError(_ variant: SourceEngine) throws {
        // max_user_watches cannot be lowered without privileges: the
        // ENOSPC that inotify_add_watch gives at the limit is injected.
        let engine = try variant.make()
        let dir = TemporaryDirectory()
        let fd = open(dir.path, O_RDONLY | O_CLOEXEC)
        defer { close(fd) }
        let injection = Syscall.Mock.inject(.inotifyAddWatch, errno: .noSpace, scope: .callingThread)
        let log = SourceLog()
        let source = IOFileSystemSource(fileDescriptor: FileDescriptor(rawValue: fd), events: .all,
                                        queue: IOQueue(label: "fs"), engine: engine)
        log.attach(source)
        source.activate()
        #expect(log.cancelled.wait(timeout: .seconds(5)))
        #expect(injection.fired == 1)
        #expect(source.registrationError == .noSpace)
        #expect(log.registrations.load(ordering: .relaxed) == 0)
        #expect(log.count == 0)
        injection.remove()
        // The failed source was the engine's first: the hub made its
        // inotify fd for it, and must still watch that fd for the next.
        #expect(expectDelivery(on: engine, in: dir, name: "other"))
    }

    @Test(arguments: SourceEngine.tested)
    func hubWatchErrorIsRearmed(_ variant: SourceEngine) throws {
        // The engine ends the hub's poll of its inotify fd with an error
        // (injected: the first poll fails with EIO): the hub watches the
        // fd again, and the sources still get their events.
        let engine = try variant.make()
        engine.faults.add(.init(target: .polls, fault: .fail(EIO), times: 1))
        let dir = TemporaryDirectory()
        #expect(expectDelivery(on: engine, in: dir, name: "f"))
        #expect(engine.faults.injected == 1)
    }
    #endif

    @Test(arguments: SourceEngine.tested)
    func privateEngineIsReleasedAfterItsSources(_ variant: SourceEngine) throws {
        // engine → inotify hub → its watch → engine was a cycle: a private
        // engine that ever had a file-system source was never released
        // (nor its ring thread, nor the inotify fd).
        let released = try isReleased(variant) { engine in
            #expect(expectDelivery(on: engine, in: TemporaryDirectory(), name: "f"))
        }
        #expect(released)
    }
}
