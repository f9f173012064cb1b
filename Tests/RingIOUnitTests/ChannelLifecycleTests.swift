import SystemPackage
import Testing
@testable import RingIOChannel

/// An fd's entry, as the lifecycle sees it: an identity.
private final class FakeEntry {}
/// An operation, as the lifecycle sees it: an identity.
private final class FakeOp {}

private typealias Lifecycle = ChannelLifecycle<FakeEntry, FakeOp>

/// Carries out what the lifecycle returns, as `ChannelCore` does, and
/// records it: the cleanup handler's calls, the operations ended without
/// I/O, what reached the entry, what was stopped, the opens started.
private struct Shell {
    var lifecycle: Lifecycle
    /// Each cleanup call: the error it got, or the entry it was handed to.
    var cleanups: [String] = []
    var finishedWithoutIO: [(FakeOp, Errno?)] = []
    var enqueued: [FakeOp] = []
    var barriersEnqueued = 0
    var barriersRun = 0
    var stops = 0
    var opens = 0
    /// Operations made active and not yet ended.
    var active: [FakeOp] = []

    init(_ target: Lifecycle.Target) {
        lifecycle = Lifecycle(target)
        if case .failed(let error) = target { cleanups.append("\(error)") }
    }

    mutating func submit(length: Int = 10) -> FakeOp {
        let op = FakeOp()
        switch lifecycle.submit(op, length: length) {
        case .finishWithoutIO(let error): finishedWithoutIO.append((op, error))
        case .enqueue: active.append(op); enqueued.append(op)
        case .deferred(let openNow): active.append(op); if openNow { opens += 1 }
        }
        return op
    }

    mutating func barrier() {
        switch lifecycle.barrier({}) {
        case .enqueue: barriersEnqueued += 1
        case .deferred(let openNow): if openNow { opens += 1 }
        case .runNow: barriersRun += 1
        }
    }

    mutating func cancel(_ op: FakeOp) {
        switch lifecycle.cancel(op) {
        case .finishWithoutIO(let cleanupNow):
            finishedWithoutIO.append((op, .canceled))
            if cleanupNow { cleanups.append("nil") }
        case .stop:
            stops += 1
        }
    }

    mutating func close(stop: Bool = false) {
        let actions = lifecycle.close(stop: stop)
        for op in actions.cancel { finishedWithoutIO.append((op, .canceled)) }
        if actions.stopActive { stops += active.count }
        if actions.closeEntry != nil { cleanups.append("entry") }
        if actions.cleanupNow { cleanups.append("nil") }
    }

    mutating func checked() {
        if lifecycle.pathChecked() { opens += 1 }
    }

    mutating func opened(_ entry: FakeEntry = FakeEntry()) {
        let actions = lifecycle.pathOpened(entry)
        for item in actions.pending {
            switch item {
            case .operation(let op): enqueued.append(op)
            case .barrier: barriersEnqueued += 1
            }
        }
        if actions.handOffCleanup { cleanups.append("entry") }
    }

    mutating func failed(_ error: Errno) {
        let actions = lifecycle.pathFailed(error)
        for item in actions.pending {
            switch item {
            case .operation(let op): finishedWithoutIO.append((op, error))
            case .barrier: barriersRun += 1
            }
        }
        if actions.runCleanup { cleanups.append("\(error)") }
    }

    /// The shell found the entry idle: the lifecycle lets go of it, or not.
    mutating func release(position: Int64? = nil) -> Bool {
        lifecycle.release(position: position) != nil
    }

    /// The errors the operations ended without I/O got, in order.
    var withoutIOErrors: [Errno?] { finishedWithoutIO.map(\.1) }
}

@Suite("ChannelLifecycle: a channel's open, close, stop and cleanup, with no kernel")
struct ChannelLifecycleTests {
    @Test("fd channel: operations go to the entry; close hands the cleanup to the entry once; later operations get ECANCELED")
    func fdChannel() {
        let entry = FakeEntry()
        var shell = Shell(.open(entry, base: 7))
        #expect(shell.lifecycle.currentEntry === entry)
        let op = shell.submit()
        var probe = Lifecycle(.open(entry, base: 7))
        guard case .enqueue(let to, let base) = probe.submit(op, length: 1) else {
            Issue.record("an open channel queues on its entry")
            return
        }
        #expect(to === entry && base == 7)
        #expect(shell.enqueued.count == 1)
        _ = shell.submit(length: 0)
        #expect(shell.withoutIOErrors == [nil], "an empty range ends at once, done")
        shell.barrier()
        #expect(shell.barriersEnqueued == 1)
        shell.close()
        #expect(shell.cleanups == ["entry"])
        #expect(shell.lifecycle.currentEntry == nil)
        shell.close()
        shell.close(stop: true)
        #expect(shell.cleanups == ["entry"], "handed off exactly once")
        #expect(shell.stops == 1, "close(stop: true) after close still stops the active operations")
        _ = shell.submit()
        #expect(shell.withoutIOErrors == [nil, .canceled])
        shell.barrier()
        #expect(shell.barriersEnqueued == 2, "a barrier still goes to the entry after close")
    }

    @Test("close(stop: true) stops the active operations once, and hands the cleanup to the entry")
    func closeWithStop() {
        var shell = Shell(.open(FakeEntry(), base: 0))
        _ = shell.submit()
        _ = shell.submit()
        shell.close(stop: true)
        #expect(shell.stops == 2)
        #expect(shell.cleanups == ["entry"])
        shell.close(stop: true)
        #expect(shell.stops == 2, "a second stop stops nothing")
    }

    @Test("a channel that failed at creation: cleanup with the error at once; every operation gets the error; barriers run")
    func failedAtCreation() {
        var shell = Shell(.failed(.badFileDescriptor))
        #expect(shell.cleanups == ["\(Errno.badFileDescriptor)"])
        _ = shell.submit()
        #expect(shell.withoutIOErrors == [.badFileDescriptor])
        shell.barrier()
        #expect(shell.barriersRun == 1)
        shell.close(stop: true)
        #expect(shell.cleanups.count == 1)
        #expect(shell.lifecycle.failure == .badFileDescriptor)
    }

    @Test("path channel: work before the check passes waits; the check opens; work during the open waits; the open runs it in order")
    func pathOpens() {
        var shell = Shell(.unopened(.checking))
        let a = shell.submit()
        shell.barrier()
        #expect(shell.opens == 0, "not before the check passed")
        shell.checked()
        #expect(shell.opens == 1)
        let b = shell.submit()
        #expect(shell.opens == 1, "one open")
        shell.opened()
        #expect(shell.enqueued.map(ObjectIdentifier.init) == [a, b].map(ObjectIdentifier.init))
        #expect(shell.barriersEnqueued == 1)
        let c = shell.submit()
        #expect(shell.enqueued.last === c, "once open, straight to the entry")
        shell.close()
        #expect(shell.cleanups == ["entry"])
    }

    @Test("path channel: checked and unused, it opens on first use; closed unused, cleanup(nil) at once")
    func pathOpensOnFirstUse() {
        var shell = Shell(.unopened(.checking))
        shell.checked()
        #expect(shell.opens == 0, "nothing waits: no open")
        shell.barrier()
        #expect(shell.opens == 1, "a barrier opens it too")

        var unused = Shell(.unopened(.checking))
        unused.checked()
        unused.close()
        #expect(unused.cleanups == ["nil"])
        unused.close(stop: true)
        #expect(unused.cleanups == ["nil"])
        unused.barrier()
        #expect(unused.barriersRun == 1, "closed and never opened: a barrier runs at once")
        #expect(unused.opens == 0)
    }

    @Test("path channel: a failed open ends what waits with its error, runs the barriers, and cleanup(error) once")
    func pathOpenFails() {
        var shell = Shell(.unopened(.checking))
        _ = shell.submit()
        shell.barrier()
        shell.checked()
        shell.failed(.permissionDenied)
        #expect(shell.withoutIOErrors == [.permissionDenied])
        #expect(shell.barriersRun == 1)
        #expect(shell.cleanups == ["\(Errno.permissionDenied)"])
        _ = shell.submit()
        #expect(shell.withoutIOErrors == [.permissionDenied, .permissionDenied])
        shell.close()
        #expect(shell.cleanups.count == 1)

        // The check itself fails (no such file).
        var missing = Shell(.unopened(.checking))
        missing.failed(.noSuchFileOrDirectory)
        #expect(missing.cleanups == ["\(Errno.noSuchFileOrDirectory)"])
    }

    @Test("close before the open completes: the waiting operations still run; the entry gets the cleanup")
    func closeBeforeOpen() {
        var shell = Shell(.unopened(.checking))
        _ = shell.submit()
        shell.checked()
        shell.close()
        #expect(shell.cleanups.isEmpty, "the open is under way: cleanup waits for it")
        _ = shell.submit()
        #expect(shell.withoutIOErrors == [.canceled], "nothing new after close")
        shell.opened()
        #expect(shell.enqueued.count == 1, "the operation queued before close runs")
        #expect(shell.cleanups == ["entry"])

        // ... and the open fails: cleanup with its error, once.
        var failing = Shell(.unopened(.checking))
        _ = failing.submit()
        failing.checked()
        failing.close()
        failing.failed(.tooManyOpenFiles)
        #expect(failing.cleanups == ["\(Errno.tooManyOpenFiles)"])
    }

    @Test("close(stop: true) before the open completes: waiting operations end with ECANCELED, barriers stay; cleanup when nothing is left")
    func stopBeforeOpen() {
        var opening = Shell(.unopened(.checking))
        _ = opening.submit()
        opening.barrier()
        opening.checked()
        opening.close(stop: true)
        #expect(opening.withoutIOErrors == [.canceled])
        #expect(opening.cleanups.isEmpty)
        opening.opened()
        #expect(opening.enqueued.isEmpty && opening.barriersEnqueued == 1)
        #expect(opening.cleanups == ["entry"])

        // Still checking, only operations waiting: nothing is left, cleanup at once.
        var checking = Shell(.unopened(.checking))
        _ = checking.submit()
        _ = checking.submit()
        checking.close(stop: true)
        #expect(checking.withoutIOErrors == [.canceled, .canceled])
        #expect(checking.cleanups == ["nil"])
        checking.checked()
        #expect(checking.opens == 0, "nothing waits: the file is never opened")
        #expect(checking.cleanups == ["nil"])
    }

    @Test("task cancellation: an operation waiting for the open ends at once; one on the entry is stopped")
    func cancel() {
        var shell = Shell(.unopened(.checking))
        let a = shell.submit()
        let b = shell.submit()
        shell.cancel(a)
        #expect(shell.finishedWithoutIO.map { ObjectIdentifier($0.0) } == [ObjectIdentifier(a)])
        shell.checked()
        shell.opened()
        #expect(shell.enqueued.map(ObjectIdentifier.init) == [ObjectIdentifier(b)])
        shell.cancel(b)
        #expect(shell.stops == 1)
    }

    @Test("close, then the last waiting operation is cancelled while the path is checked: cleanup(nil) runs once (it never ran before)")
    func cancelLastWaitingAfterClose() {
        var shell = Shell(.unopened(.checking))
        let op = shell.submit()
        shell.close()
        #expect(shell.cleanups.isEmpty, "an operation waits")
        shell.cancel(op)
        #expect(shell.cleanups == ["nil"], "nothing waits and nothing will open")
        shell.checked()
        #expect(shell.opens == 0)
        #expect(shell.cleanups == ["nil"])

        // The same with close(stop: true) after a plain close.
        var twice = Shell(.unopened(.checking))
        _ = twice.submit()
        twice.close()
        twice.close(stop: true)
        #expect(twice.withoutIOErrors == [.canceled])
        #expect(twice.cleanups == ["nil"])
    }

    // MARK: - letting go of the fd

    @Test("an idle open path channel lets go of its entry; the next use reopens at the position kept; work during the reopen waits, then runs in order")
    func releaseAndReopen() {
        var shell = Shell(.unopened(.checking))
        shell.checked()
        _ = shell.submit()
        shell.opened()
        let result1 = shell.release(position: 1234)
        #expect(result1)
        #expect(shell.lifecycle.currentEntry == nil)
        #expect(shell.lifecycle.reopening == nil, "released, not reopening yet")
        #expect(shell.opens == 1)
        let a = shell.submit()
        #expect(shell.opens == 2, "the next use opens it again")
        #expect(shell.lifecycle.reopening == .some(1234), "a reopen, with the stream position to restore")
        shell.barrier()
        let b = shell.submit()
        #expect(shell.opens == 2, "one reopen")
        let entry = FakeEntry()
        shell.opened(entry)
        #expect(shell.enqueued.suffix(2).map(ObjectIdentifier.init) == [a, b].map(ObjectIdentifier.init))
        #expect(shell.barriersEnqueued == 1)
        #expect(shell.lifecycle.currentEntry === entry)
        #expect(shell.lifecycle.reopening == nil)
        // A random channel: no position.
        let result2 = shell.release(position: nil)
        #expect(result2)
        shell.barrier()
        #expect(shell.lifecycle.reopening == .some(nil), "a barrier reopens too")
        shell.opened()
        shell.close()
        #expect(shell.cleanups == ["entry"])
    }

    @Test("a read on the caller's thread opens a checked or released path there; what arrives meanwhile waits for it, in order; never while checking, with work waiting, or closed")
    func openNow() {
        var shell = Shell(.unopened(.checking))
        let began1 = shell.lifecycle.beginOpenNow()
        #expect(!began1, "not while the check runs")
        shell.checked()
        let began2 = shell.lifecycle.beginOpenNow()
        #expect(began2)
        #expect(shell.lifecycle.reopening == nil, "a first open")
        let began3 = shell.lifecycle.beginOpenNow()
        #expect(!began3, "one open at a time")
        let a = shell.submit()
        shell.barrier()
        #expect(shell.opens == 0, "work during the open waits for it, and starts no other")
        let entry = FakeEntry()
        shell.opened(entry)
        #expect(shell.enqueued.map(ObjectIdentifier.init) == [ObjectIdentifier(a)])
        #expect(shell.barriersEnqueued == 1)
        #expect(shell.lifecycle.currentEntry === entry)
        let began4 = shell.lifecycle.beginOpenNow()
        #expect(!began4, "open already")
        // Released: a reopen at the stream position kept.
        let released = shell.release(position: 77)
        #expect(released)
        let began5 = shell.lifecycle.beginOpenNow()
        #expect(began5)
        #expect(shell.lifecycle.reopening == .some(77))
        shell.failed(.staleNFSFileHandle)
        #expect(shell.cleanups == ["\(Errno.staleNFSFileHandle)"])
        let began6 = shell.lifecycle.beginOpenNow()
        #expect(!began6, "failed")
        // Work waiting, or closed: no.
        var waiting = Shell(.unopened(.checking))
        _ = waiting.submit()
        waiting.checked()
        let began7 = waiting.lifecycle.beginOpenNow()
        #expect(!began7, "already opening for the work that waited")
        var closed = Shell(.unopened(.checking))
        closed.checked()
        closed.close()
        let began8 = closed.lifecycle.beginOpenNow()
        #expect(!began8)
        #expect(closed.cleanups == ["nil"])
        // Closed while it opens here: the entry gets the cleanup.
        var closing = Shell(.unopened(.checking))
        closing.checked()
        let began9 = closing.lifecycle.beginOpenNow()
        #expect(began9)
        closing.close()
        #expect(closing.cleanups.isEmpty, "the open is under way")
        closing.opened()
        #expect(closing.cleanups == ["entry"])
    }

    @Test("a pinned channel never lets go; nor does a closed, unopened or failed one")
    func releaseRefused() {
        var pinned = Shell(.open(FakeEntry(), base: 0))
        let result3 = pinned.lifecycle.pin()
        #expect(result3 != nil)
        let result4 = pinned.release()
        #expect(!result4)
        #expect(pinned.lifecycle.currentEntry != nil)

        var unopened = Shell(.unopened(.checking))
        let result5 = unopened.lifecycle.pin()
        #expect(result5 == nil, "no fd to show: nothing pinned")
        #expect(!unopened.lifecycle.pinned)
        let result6 = unopened.release()
        #expect(!result6)
        unopened.checked()
        let result7 = unopened.release()
        #expect(!result7)

        var closed = Shell(.open(FakeEntry(), base: 0))
        closed.close()
        let result8 = closed.release()
        #expect(!result8)

        var failed = Shell(.failed(.badFileDescriptor))
        let result9 = failed.release()
        #expect(!result9)

        // Released, then the user asks for the fd: none, nothing pinned;
        // once reopened and shown, pinned.
        var later = Shell(.open(FakeEntry(), base: 0))
        let result10 = later.release()
        #expect(result10)
        let result11 = later.lifecycle.pin()
        #expect(result11 == nil && !later.lifecycle.pinned)
        _ = later.submit()
        later.opened()
        let result12 = later.lifecycle.pin()
        #expect(result12 != nil)
        let result13 = later.release()
        #expect(!result13)
    }

    @Test("released, then closed: cleanup(nil) at once, no reopen; a failed reopen ends what waits with its error and runs cleanup(error) once")
    func releasedThenClosedOrFailed() {
        var idle = Shell(.open(FakeEntry(), base: 0))
        let result14 = idle.release(position: 5)
        #expect(result14)
        idle.close()
        #expect(idle.cleanups == ["nil"])
        _ = idle.submit()
        #expect(idle.withoutIOErrors == [.canceled])
        idle.barrier()
        #expect(idle.barriersRun == 1 && idle.opens == 0, "closed and released: a barrier runs at once")

        var replaced = Shell(.open(FakeEntry(), base: 0))
        let result15 = replaced.release(position: 5)
        #expect(result15)
        _ = replaced.submit()
        replaced.barrier()
        replaced.close()
        #expect(replaced.cleanups.isEmpty, "the reopen is under way: cleanup waits for it")
        replaced.failed(.staleNFSFileHandle)
        #expect(replaced.withoutIOErrors == [.staleNFSFileHandle])
        #expect(replaced.barriersRun == 1)
        #expect(replaced.cleanups == ["\(Errno.staleNFSFileHandle)"])
        #expect(replaced.lifecycle.failure == .staleNFSFileHandle)
    }

    // MARK: - unchecked path channels (the first read's open is the check)

    @Test("unchecked: a read on the caller's thread opens it there; what arrives meanwhile waits; the open is the check")
    func uncheckedOpenedByRead() {
        var shell = Shell(.unopened(.unchecked))
        let r1 = shell.lifecycle.beginOpenNow()
        #expect(r1)
        #expect(shell.lifecycle.target.isOpeningUnchecked)
        let op = shell.submit()
        #expect(shell.opens == 0, "the open under way serves it")
        shell.opened()
        #expect(shell.enqueued.map(ObjectIdentifier.init) == [ObjectIdentifier(op)])
        #expect(shell.lifecycle.currentEntry != nil)
        let r2 = shell.lifecycle.beginCheck()
        #expect(!r2, "nothing left to check")
    }

    @Test("unchecked: an open there that cannot answer checks instead; what waits is opened after the check, or fails with its error")
    func uncheckedFallsBackToCheck() {
        var shell = Shell(.unopened(.unchecked))
        let r3 = shell.lifecycle.beginOpenNow()
        #expect(r3)
        let op = shell.submit()
        let r4 = shell.lifecycle.checkInstead()
        #expect(r4 == (check: true, cleanupNow: false))
        #expect(!shell.lifecycle.opensNoMore)
        shell.checked()
        #expect(shell.opens == 1, "the waiting operation opens the checked path")
        shell.opened()
        #expect(shell.enqueued.map(ObjectIdentifier.init) == [ObjectIdentifier(op)])

        var missing = Shell(.unopened(.unchecked))
        let r5 = missing.lifecycle.beginOpenNow()
        #expect(r5)
        let r6 = missing.lifecycle.checkInstead()
        #expect(r6 == (check: true, cleanupNow: false))
        #expect(missing.lifecycle.opensNoMore, "nothing waits yet: the read is submitted after")
        _ = missing.submit()
        missing.failed(.noSuchFileOrDirectory)
        #expect(missing.withoutIOErrors == [.noSuchFileOrDirectory])
        #expect(missing.cleanups == ["\(Errno.noSuchFileOrDirectory)"])

        // Closed while the open ran, nothing waiting: no check, cleanup(nil) once.
        var closed = Shell(.unopened(.unchecked))
        let r7 = closed.lifecycle.beginOpenNow()
        #expect(r7)
        closed.close()
        #expect(closed.cleanups.isEmpty, "the open under way: cleanup waits for it")
        let r8 = closed.lifecycle.checkInstead()
        #expect(r8 == (check: false, cleanupNow: true))
    }

    @Test("unchecked: any other first use, or the sweep, checks it first; closed unused: cleanup(nil) at once, no check")
    func uncheckedOtherUses() {
        var write = Shell(.unopened(.unchecked))
        _ = write.submit()
        if case .unopened(.checking) = write.lifecycle.target {} else { Issue.record("\(write.lifecycle.target)") }
        #expect(write.opens == 0)
        write.checked()
        #expect(write.opens == 1)

        var barrier = Shell(.unopened(.unchecked))
        barrier.barrier()
        if case .unopened(.checking) = barrier.lifecycle.target {} else { Issue.record("\(barrier.lifecycle.target)") }

        var empty = Shell(.unopened(.unchecked))
        _ = empty.submit(length: 0)
        #expect(empty.lifecycle.target.isUnchecked, "an empty range opens nothing")

        var swept = Shell(.unopened(.unchecked))
        let r9 = swept.lifecycle.beginCheck()
        #expect(r9)
        let r10 = swept.lifecycle.beginCheck()
        #expect(!r10, "once")
        let r11 = swept.lifecycle.beginOpenNow()
        #expect(!r11, "being checked: not opened on a reader's thread")
        swept.checked()
        let r12 = swept.lifecycle.beginOpenNow()
        #expect(swept.opens == 0 && r12, "checked, then opened by the first read")

        var unused = Shell(.unopened(.unchecked))
        unused.close()
        #expect(unused.cleanups == ["nil"])
        let r13 = unused.lifecycle.beginCheck()
        let r14 = unused.lifecycle.beginOpenNow()
        #expect(!r13 && !r14)
    }

    @Test("checkInstead when not opening unchecked stops the process")
    func checkInsteadWhenNotOpening() async {
        await #expect(processExitsWith: .failure) {
            var lifecycle = Lifecycle(.unopened(.checked))
            _ = lifecycle.checkInstead()
        }
    }

    // MARK: - events that cannot happen stop the process

    @Test("an open completing for a channel that was not opening stops the process")
    func openedWithoutOpening() async {
        await #expect(processExitsWith: .failure) {
            var lifecycle = Lifecycle(.unopened(.checking))
            _ = lifecycle.pathOpened(FakeEntry())
        }
    }

    @Test("a second check result stops the process")
    func checkedTwice() async {
        await #expect(processExitsWith: .failure) {
            var lifecycle = Lifecycle(.unopened(.checking))
            _ = lifecycle.pathChecked()
            _ = lifecycle.pathChecked()
        }
    }
}
