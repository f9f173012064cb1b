#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIOQueue
@_spi(Engine) @testable import RingIO
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

/// The pool's epoll set (WorkerPool+Readiness.swift): the worker the kernel
/// wakes runs the handler; the rules that hold for every watch.
@Suite struct SourceReadinessPoolTests {
    /// The mechanism, not the rate: the readinesses of a ping-pong are taken
    /// by a pool worker from the epoll set, and none goes through the
    /// engine's ring (on the old code each cost an `io_uring_enter` of the
    /// ring thread, then a hand-off to a worker).
    @Test(arguments: SourceEngine.tested)
    func readinessIsTakenByAPoolWorkerNotTheEngine(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let ab = SourcePipe(), ba = SourcePipe()
        let rounds = Atomic<Int>(0)
        let done = Latch()
        let a = IOReadSource(fileDescriptor: FileDescriptor(rawValue: ba.readFD), queue: IOQueue(label: "a"), engine: engine)
        let b = IOReadSource(fileDescriptor: FileDescriptor(rawValue: ab.readFD), queue: IOQueue(label: "b"), engine: engine)
        a.setEventHandler {
            _ = ba.read(1)
            if rounds.add(1, ordering: .relaxed).newValue == 200 { done.signal() } else { ab.write([1]) }
        }
        b.setEventHandler {
            _ = ab.read(1)
            ba.write([1])
        }
        a.activate()
        b.activate()
        let poller = try #require(WorkerPool.shared.readinessPollerIfMade)
        let takenBefore = poller.byWorker.load(ordering: .relaxed) + poller.byWatchdog.load(ordering: .relaxed)
        let entersBefore = engine.enterCalls
        ab.write([1])
        #expect(done.wait(timeout: .seconds(300)))
        let taken = poller.byWorker.load(ordering: .relaxed) + poller.byWatchdog.load(ordering: .relaxed) - takenBefore
        // (A readiness that came before its source's handler returned is
        // seen by the look after the handler: no watch involved.)
        #expect(taken >= 100, "the readinesses are taken from the pool's epoll set")
        #expect(engine.enterCalls - entersBefore < 50, "the engine's ring took no part")
        a.cancel()
        b.cancel()
    }

    /// While every worker runs a job, no worker waits on the set: the
    /// watchdog looks at it, and the delivery it enqueues gets a worker
    /// (the watchdog adds one for it). Fails (hangs) without the watchdog's look.
    @Test func readinessWhileEveryWorkerIsBusy() throws {
        let pipe = SourcePipe()
        let delivered = Latch()
        let source = IOReadSource(fileDescriptor: FileDescriptor(rawValue: pipe.readFD), queue: IOQueue(label: "r"))
        source.setEventHandler {
            _ = pipe.read(1)
            delivered.signal()
        }
        let log = SourceLog()
        source.setCancelHandler { log.cancelled.signal() }
        source.activate()
        // Every base worker blocks until the delivery came.
        let blockers = IOQueue(label: "blockers", kind: .concurrent)
        let blocking = Atomic<Int>(0)
        let base = WorkerPool.shared.baseThreads
        for _ in 0..<base {
            blockers.async {
                blocking.add(1, ordering: .relaxed)
                _ = delivered.wait(timeout: .seconds(300))
            }
        }
        #expect(waitUntil(timeout: .seconds(300)) { blocking.load(ordering: .relaxed) == base })
        pipe.write([1])
        #expect(delivered.wait(timeout: .seconds(300)))  // (and every blocker goes on)
        source.cancel()
        #expect(log.cancelled.wait(timeout: .seconds(300)))
    }

    /// epoll refuses a regular file (EPERM): the engine watches it; it is
    /// always readable, so the handler runs.
    @Test(arguments: SourceEngine.tested)
    func regularFileFallsBackToTheEngine(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let path = "/tmp/ringio-readiness-\(getpid())-\(variant.rawValue)"
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        defer { close(fd); unlink(path) }
        _ = write(fd, "abc", 3)
        let log = SourceLog()
        let source = IOReadSource(fileDescriptor: FileDescriptor(rawValue: fd), queue: IOQueue(label: "f"), engine: engine)
        log.attach(source) { _ in source.cancel() }
        source.activate()
        #expect(log.cancelled.wait())
        #expect(log.count == 1)
        #expect(source.registrationError == nil)
    }

    /// The watch's dup of the fd is closed when the source is cancelled
    /// (counted by the pipe's inode among this process's fds).
    @Test(arguments: SourceEngine.tested)
    func cancelClosesTheWatchsDup(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let pipe = SourcePipe()
        var st = stat()
        try #require(fstat(pipe.readFD, &st) == 0)
        let name = "pipe:[\(st.st_ino)]"
        func openCount() -> Int {
            var n = 0
            guard let dir = opendir("/proc/self/fd") else { return -1 }
            defer { closedir(dir) }
            while let entry = readdir(dir) {
                let fd = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
                var buffer = [CChar](repeating: 0, count: 64)
                let length = readlink("/proc/self/fd/\(fd)", &buffer, 63)
                if length > 0, String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) == name {
                    n += 1
                }
            }
            return n
        }
        let before = openCount()
        let log = SourceLog()
        let source = IOReadSource(fileDescriptor: FileDescriptor(rawValue: pipe.readFD), queue: IOQueue(label: "r"), engine: engine)
        log.attach(source) { _ in _ = pipe.read(1) }
        source.activate()
        pipe.write([1])
        #expect(waitUntil { log.count == 1 })
        #expect(openCount() == before + 1, "the watch holds a dup while active")
        source.cancel()
        #expect(log.cancelled.wait())
        #expect(waitUntil { openCount() == before })
    }
}
