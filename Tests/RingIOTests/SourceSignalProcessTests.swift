#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOSources
@testable import RingIOBase

/// Signal and process sources (process checks after libdispatch's
/// tests/dispatch_proc.c, written anew), on io_uring, io_uring as an old
/// kernel, and the thread pool. Serialized: signals are process-wide.
@Suite(.serialized) struct SourceSignalProcessTests {
    @Test(arguments: SourceEngine.tested)
    func signalsAreCountedByEverySource(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let first = SourceLog(), second = SourceLog()
        let a = IOSignalSource(signal: SIGUSR1, queue: IOQueue(label: "s1"), engine: engine)
        let b = IOSignalSource(signal: SIGUSR1, queue: IOQueue(label: "s2"), engine: engine)
        first.attach(a)
        second.attach(b)
        a.activate()
        b.activate()
        #expect(waitUntil { first.registrations.load(ordering: .relaxed) == 1 && second.registrations.load(ordering: .relaxed) == 1 })
        for i in 1...5 {
            kill(getpid(), SIGUSR1)
            #expect(waitUntil { first.total == UInt(i) && second.total == UInt(i) }, "signal \(i)")
        }
        a.cancel()
        b.cancel()
        #expect(first.cancelled.wait() && second.cancelled.wait())
        #expect(first.total == 5 && second.total == 5)
    }

    @Test(arguments: SourceEngine.tested)
    func signalStorm(_ variant: SourceEngine) throws {
        // 20,000 signals as fast as kill can send them, from two threads:
        // the process survives, every delivery counts at least one, the
        // count never exceeds what was sent, and cancel still works.
        let engine = try variant.make()
        let log = SourceLog()
        let source = IOSignalSource(signal: SIGUSR2, queue: IOQueue(label: "storm"), engine: engine)
        log.attach(source)
        source.activate()
        #expect(waitUntil { log.registrations.load(ordering: .relaxed) == 1 })
        let senders = Latch(count: 2)
        for _ in 0..<2 {
            SignalSender.detach {
                for _ in 0..<10_000 { kill(getpid(), SIGUSR2) }
                senders.signal()
            }
        }
        #expect(senders.wait(timeout: .seconds(60)))
        #expect(waitUntil { log.total >= 1 })
        milliseconds(50)
        #expect(log.total <= 20_000)
        #expect(log.deliveries.withLock { $0.allSatisfy { $0 >= 1 } })
        source.cancel()
        #expect(log.cancelled.wait())
        // The old action is back: SIG_DFL for SIGUSR2 (not sent: it would end the run).
        var action = sigaction()
        sigaction(SIGUSR2, nil, &action)
        #expect(action.__sigaction_handler.sa_handler == nil)
    }

    @Test(arguments: SourceEngine.tested)
    func childExitWithStatusAndStillReapable(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let pid = spawnShell("sleep 0.05; exit 3")
        let log = SourceLog()
        let source = IOProcessSource(processID: pid, queue: IOQueue(label: "p"), engine: engine)
        log.attach(source)
        source.activate()
        #expect(waitUntil { log.count == 1 })
        #expect(log.deliveries.withLock { $0 } == [IOProcessSource.Event.exit.rawValue])
        #expect(source.exitStatus == 3 << 8)
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid, "the source reaped the child")
        #expect(status == 3 << 8)
        // The reaping wakes the pidfd again: still one `.exit` (failed before: 2).
        milliseconds(20)
        source.cancel()
        #expect(log.cancelled.wait())
        #expect(log.count == 1)
    }

    @Test(arguments: SourceEngine.tested)
    func processGoneBeforeActivation(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        // Exited, not reaped (a zombie): the status is there.
        let zombie = spawnShell("exit 7")
        milliseconds(50)
        let log = SourceLog()
        let source = IOProcessSource(processID: zombie, queue: IOQueue(label: "p"), engine: engine)
        log.attach(source)
        source.activate()
        #expect(waitUntil { log.count == 1 })
        #expect(source.exitStatus == 7 << 8)
        var status: Int32 = 0
        _ = waitpid(zombie, &status, 0)
        // Exited and reaped: `.exit` once, no status.
        let reaped = IOProcessSource(processID: zombie, queue: IOQueue(label: "p"), engine: engine)
        let log2 = SourceLog()
        log2.attach(reaped)
        reaped.activate()
        #expect(waitUntil { log2.count == 1 })
        milliseconds(20)
        #expect(log2.count == 1)
        #expect(reaped.exitStatus == nil)
        source.cancel()
        reaped.cancel()
        #expect(log.cancelled.wait() && log2.cancelled.wait())
    }

    @Test(arguments: SourceEngine.tested)
    func killedChildAndNonChild(_ variant: SourceEngine) throws {
        let engine = try variant.make()
        let pid = spawnShell("sleep 30")
        let log = SourceLog()
        let source = IOProcessSource(processID: pid, queue: IOQueue(label: "p"), engine: engine)
        log.attach(source)
        source.activate()
        #expect(waitUntil { log.registrations.load(ordering: .relaxed) == 1 })
        milliseconds(10)
        #expect(log.count == 0)
        kill(pid, SIGKILL)
        #expect(waitUntil { log.count == 1 })
        #expect(source.exitStatus == SIGKILL)
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        source.cancel()
        #expect(log.cancelled.wait())
    }

    @Test(arguments: SourceEngine.tested)
    func privateEngineIsReleasedAfterItsSignalSources(_ variant: SourceEngine) throws {
        // The signal hub and its watch must not keep a private engine alive
        // once its sources are cancelled.
        let released = try isReleased(variant) { engine in
            let log = SourceLog()
            let source = IOSignalSource(signal: SIGUSR2, queue: IOQueue(label: "s"), engine: engine)
            log.attach(source)
            source.activate()
            #expect(waitUntil { log.registrations.load(ordering: .relaxed) == 1 })
            kill(getpid(), SIGUSR2)
            #expect(waitUntil { log.total == 1 })
            source.cancel()
            #expect(log.cancelled.wait())
        }
        #expect(released)
    }
}

/// A detached thread for tests (signal senders).
enum SignalSender {
    static func detach(_ body: @escaping @Sendable () -> Void) {
        spawnThread(name: "test-sender", body)
    }
}
