#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOSources

/// Read and write sources (after libdispatch's tests/dispatch_select.c and
/// dispatch_io_pipe.c, written anew), on io_uring, io_uring as an old
/// kernel, and the thread pool.
@Suite struct SourceReadWriteTests {
    @Test(arguments: SourceEngine.tested)
    func readSourceEstimatesAndSeesEndOfFile(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let pipe = SourcePipe()
        let log = SourceLog()
        let source = IOReadSource(fileDescriptor: FileDescriptor(rawValue: pipe.readFD),
                                  queue: IOQueue(label: "r"), engine: engine)
        log.attach(source) { data in
            if data == 0 { source.cancel() } else { _ = pipe.read(Int(data)) }
        }
        source.activate()
        pipe.write(Array(repeating: 7, count: 100))
        #expect(waitUntil { log.count == 1 })
        #expect(log.deliveries.withLock { $0 } == [100])
        pipe.write(Array(repeating: 7, count: 3))
        #expect(waitUntil { log.count == 2 })
        pipe.closeWriter()
        #expect(log.cancelled.wait())
        #expect(log.deliveries.withLock { $0 } == [100, 3, 0])
        #expect(log.registrations.load(ordering: .relaxed) == 1)
    }

    @Test(arguments: SourceEngine.tested)
    func readSourceIsLevelTriggered(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let pipe = SourcePipe()
        let log = SourceLog()
        let source = IOReadSource(fileDescriptor: FileDescriptor(rawValue: pipe.readFD),
                                  queue: IOQueue(label: "r", kind: .concurrent), engine: engine)
        log.attach(source) { _ in _ = pipe.read(1) }  // drains one byte per call
        source.activate()
        pipe.write(Array(repeating: 1, count: 10))
        #expect(waitUntil { log.count == 10 })
        milliseconds(30)
        #expect(log.deliveries.withLock { $0 } == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1])
        #expect(log.overlapping.load(ordering: .relaxed) == 0)
        source.cancel()
        #expect(log.cancelled.wait())
    }

    /// The watch holds its read source strongly from activation to the
    /// cancel: then the source is released.
    @Test(arguments: SourceEngine.tested)
    func cancelledReadSourceIsReleased(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let pipe = SourcePipe()
        weak var released: IOReadSource?
        do {
            let log = SourceLog()
            let source = IOReadSource(fileDescriptor: FileDescriptor(rawValue: pipe.readFD),
                                      queue: IOQueue(label: "r"), engine: engine)
            released = source
            log.attach(source) { _ in _ = pipe.read(1) }
            source.activate()
            pipe.write([1])
            #expect(waitUntil { log.count == 1 })
            source.cancel()
            #expect(log.cancelled.wait())
        }
        #expect(waitUntil { released == nil })
    }

    @Test(arguments: SourceEngine.tested)
    func writeSourceWaitsForRoom(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let pipe = SourcePipe(nonBlocking: true)
        // Fill the pipe.
        let chunk = [UInt8](repeating: 0, count: 4096)
        while chunk.withUnsafeBytes({ Glibc.write(pipe.writeFD, $0.baseAddress, $0.count) }) > 0 {}
        let log = SourceLog()
        let source = IOWriteSource(fileDescriptor: FileDescriptor(rawValue: pipe.writeFD),
                                   queue: IOQueue(label: "w"), engine: engine)
        log.attach(source) { _ in source.suspend() }
        source.activate()
        milliseconds(30)
        #expect(log.count == 0, "a full pipe was reported writable")
        while pipe.read(65536) > 0 {}
        #expect(waitUntil { log.count == 1 })
        #expect(log.deliveries.withLock { $0[0] } >= 4096)
        source.resume()
        source.cancel()
        #expect(log.cancelled.wait())
    }

    @Test(arguments: SourceEngine.tested)
    func pingPongOverTwoPipes(_ variant: SourceEngine) throws {
        // dispatch_io_pipe.c's shape: each side answers what it reads.
        let engine = try variant.make()
        let ab = SourcePipe(), ba = SourcePipe()
        let rounds = Atomic<Int>(0)
        let done = Latch()
        let queue = IOQueue(label: "pp")
        let a = IOReadSource(fileDescriptor: FileDescriptor(rawValue: ba.readFD), queue: queue, engine: engine)
        let b = IOReadSource(fileDescriptor: FileDescriptor(rawValue: ab.readFD), queue: queue, engine: engine)
        a.setEventHandler {
            _ = ba.read(1)
            if rounds.add(1, ordering: .relaxed).newValue == 2000 { done.signal() } else { ab.write([1]) }
        }
        b.setEventHandler {
            _ = ab.read(1)
            ba.write([1])
        }
        a.activate()
        b.activate()
        ab.write([1])
        #expect(done.wait(timeout: .seconds(30)))
        a.cancel()
        b.cancel()
    }

    @Test(arguments: SourceEngine.tested)
    func closedAndReusedFdUnderALiveSource(_ variant: SourceEngine) throws {
        // The fd is closed under an active source and its number reused by
        // another pipe: no crash, no hang; cancel still runs its handler.
        let engine = try variant.make()
        let pipe = SourcePipe()
        let log = SourceLog()
        let fd = pipe.readFD
        let source = IOReadSource(fileDescriptor: FileDescriptor(rawValue: fd), queue: IOQueue(label: "r"), engine: engine)
        log.attach(source)
        source.activate()
        milliseconds(10)
        pipe.closeReader()
        pipe.closeWriter()
        let reuse = SourcePipe()  // takes the lowest free numbers: `fd` among them
        reuse.write([1, 2, 3])
        milliseconds(30)
        source.cancel()
        #expect(log.cancelled.wait())
        #expect(log.cancels.load(ordering: .relaxed) == 1)
    }

    @Test(arguments: SourceEngine.tested)
    func aClosedFdIsARegistrationError(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let pipe = SourcePipe()
        // A closed number far above the ones in use: fds are handed out
        // lowest first, so another test's pipe or a new worker's eventfd
        // cannot take it between the close and the registration (the
        // pipe's own number was taken so once, under TSan, and the source
        // registered on another test's fd).
        let fd = fcntl(pipe.readFD, F_DUPFD_CLOEXEC, 4000)
        #expect(fd >= 4000)
        close(fd)
        pipe.closeReader()
        let log = SourceLog()
        let source = IOReadSource(fileDescriptor: FileDescriptor(rawValue: fd), queue: IOQueue(label: "r"), engine: engine)
        log.attach(source)
        source.activate()
        #expect(log.cancelled.wait())
        #expect(source.registrationError == .badFileDescriptor)
        #expect(log.registrations.load(ordering: .relaxed) == 0)
        #expect(source.isCancelled)
    }
}
