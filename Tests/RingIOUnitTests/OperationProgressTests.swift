#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOData

/// The byte at `offset` of the fake file.
private func fileByte(_ offset: Int) -> UInt8 { UInt8(truncatingIfNeeded: offset &* 7 &+ 3) }
private func fileBytes(_ range: Range<Int>) -> [UInt8] { range.map(fileByte) }

/// A slot's buffer: it holds the fake file's bytes once read.
private struct FakeSlot: ProgressPayload {
    let start: Int
    func chunk(range: Range<Int>) -> DataChunk {
        DataChunk(fileBytes((start + range.lowerBound)..<(start + range.upperBound)))
    }
}

/// The file and the engine as the progress asks about them.
private final class FakeHost: OperationProgressHost {
    var position: Result<Int64, Errno> = .success(0)
    var length: Int64?
    /// How many more slots the read budget allows.
    var budget = Int.max
    var made: [NewSlot] = []
    func filePosition() -> Result<Int64, Errno> { position }
    func fileLength() -> Int64? { length }
    func makeSlot(_ slot: NewSlot) -> FakeSlot? {
        guard budget > 0 else { return nil }
        budget -= 1
        made.append(slot)
        return FakeSlot(start: slot.start)
    }
}

/// One handler call, as the handler sees it.
private struct HandlerCall: Equatable, CustomStringConvertible {
    let done: Bool
    let data: [UInt8]?
    let error: Errno?
    var description: String { "(\(done), \(data.map { "\($0.count) bytes" } ?? "nil"), \(error.map { "\($0)" } ?? "nil"))" }
}

private typealias Progress = OperationProgress<FakeSlot>

/// Drives an `OperationProgress` the way `ChannelOperation` does, with no
/// kernel: completions are made up by the test.
private struct Driver {
    var progress: Progress
    let host = FakeHost()
    var calls: [HandlerCall] = []
    /// Slots a request went out for, in the order they were opened.
    var opened: [Int] = []
    var again: [Progress.Again] = []
    /// What `finishIO` asked for, when the driver finished the I/O.
    var finishStep: Progress.FinishStep?
    /// Deliveries queued before the final step was carried out.
    var queuedBeforeFinalStep: Int?

    init(_ direction: OperationDirection, stream: Bool = false, length: Int, data: DataChunk = .empty,
         settings: ChannelSettings = ChannelSettings(), options: OperationOptions = OperationOptions()) {
        progress = Progress(direction: direction, isStream: stream, settings: settings, options: options,
                            offset: 0, length: length, data: data)
    }

    /// 4 KiB requests and deliveries.
    static var small: ChannelSettings {
        var settings = ChannelSettings()
        settings.high = 4096
        return settings
    }

    @discardableResult
    mutating func start(_ context: Progress.StartContext = .init()) -> Progress.Actions {
        note(progress.start(context, host: host))
    }

    @discardableResult
    mutating func complete(_ id: Int, _ res: Int32) -> Progress.Actions {
        note(progress.completed(id, res, host: host))
    }

    @discardableResult
    mutating func note(_ actions: Progress.Actions) -> Progress.Actions {
        opened += Array(actions.fresh)
        if let a = actions.again { again.append(a) }
        if actions.finish { finish(ranOnEntry: true) }
        return actions
    }

    mutating func finish(ranOnEntry: Bool) {
        guard let step = progress.finishIO(ranOnEntry: ranOnEntry) else { return }
        finishStep = step
        queuedBeforeFinalStep = progress.deliveries.count
        _ = progress.queueFinalDeliveries(tellEntry: ranOnEntry)
    }

    /// Runs the queued handler calls, as the runner does.
    mutating func drain() {
        while let delivery = progress.nextDelivery() {
            calls.append(HandlerCall(done: delivery.done, data: delivery.data.map { Array($0) }, error: delivery.error))
            opened += Array(progress.handlerReturned(delivery, host: host))
        }
    }
}

@Suite("OperationProgress: one operation's rules, with no kernel")
struct OperationProgressTests {
    @Test("out-of-order completions are delivered in file order; slots freed in order open new ones")
    func fileOrder() {
        var d = Driver(.read, length: 8 * 4096, settings: Driver.small)
        d.start()
        #expect(d.opened == [0, 1, 2, 3])
        #expect(d.host.made.map(\.start) == [0, 4096, 8192, 12288])
        d.complete(2, 4096)
        d.complete(1, 4096)
        d.drain()
        #expect(d.calls.isEmpty, "slot 0 is not back: nothing may be delivered")
        #expect(d.opened == [0, 1, 2, 3], "no slot is freed before slot 0")
        d.complete(0, 4096)
        d.drain()
        #expect(d.calls == (0..<3).map { HandlerCall(done: false, data: fileBytes(($0 * 4096)..<(($0 + 1) * 4096)), error: nil) })
        #expect(d.opened == [0, 1, 2, 3, 4, 5, 6])
        for id in [6, 5, 3, 4] { d.complete(id, 4096) }
        #expect(d.opened == Array(0...7))
        d.complete(7, 4096)
        d.drain()
        let bytes = d.calls.flatMap { $0.data ?? [] }
        #expect(bytes == fileBytes(0..<(8 * 4096)))
        #expect(d.calls.last == HandlerCall(done: true, data: fileBytes((7 * 4096)..<(8 * 4096)), error: nil))
        #expect(d.calls.dropLast().allSatisfy { !$0.done })
    }

    @Test("low water: a file delivers per chunk (min(high, chunk size)); a pipe what each read returns")
    func waterMarks() {
        // A file, default marks: 1 MiB requests, nothing delivered below a chunk.
        var file = Driver(.read, length: 2 * IOChannel.chunkSize)
        file.start()
        #expect(file.progress.requestSize == IOChannel.chunkSize)
        file.complete(0, Int32(IOChannel.chunkSize / 2))
        #expect(file.again == [.rest(0)], "a short read goes on")
        file.drain()
        #expect(file.calls.isEmpty, "half a chunk stays below the low-water mark")
        file.complete(0, Int32(IOChannel.chunkSize / 2))
        file.drain()
        #expect(file.calls.map { $0.data?.count } == [IOChannel.chunkSize])

        // A pipe (stream, not positional), default marks: every read is delivered.
        var pipe = Driver(.read, stream: true, length: 1000)
        pipe.start(.init(positionalFile: false))
        #expect(pipe.opened == [0], "one read at a time on a pipe")
        pipe.complete(0, 10)
        pipe.drain()
        #expect(pipe.calls == [HandlerCall(done: false, data: fileBytes(0..<10), error: nil)])
        #expect(pipe.opened == [0, 1])

        // Marks set: low 10, high 20. 15 bytes reach low, 5 do not; 30 go out as 20 + 10.
        var settings = ChannelSettings()
        settings.low = 10
        settings.high = 20
        var marked = Driver(.read, stream: true, length: 1000, settings: settings)
        marked.start(.init(positionalFile: false))
        marked.complete(0, 15)
        marked.drain()
        #expect(marked.calls.map { $0.data?.count } == [15])
        marked.complete(1, 5)
        marked.drain()
        #expect(marked.calls.count == 1, "5 bytes stay below low water")
        marked.complete(2, 25)
        marked.drain()
        #expect(marked.calls.map { $0.data?.count } == [15, 20, 10])
    }

    @Test("a strict interval tick delivers what is buffered, even nothing; a non-strict one does not")
    func intervals() {
        var settings = ChannelSettings()
        settings.low = 100
        settings.interval = .milliseconds(10)
        settings.strictInterval = true
        var strict = Driver(.read, stream: true, length: 1000, settings: settings)
        let actions = strict.start(.init(positionalFile: false))
        #expect(actions.interval == .milliseconds(10))
        #expect(strict.progress.tick() == .schedule)
        strict.drain()
        #expect(strict.calls == [HandlerCall(done: false, data: [], error: nil)])
        strict.complete(0, 30)
        _ = strict.progress.tick()
        strict.drain()
        #expect(strict.calls.last == HandlerCall(done: false, data: fileBytes(0..<30), error: nil))

        settings.strictInterval = false
        var lax = Driver(.read, stream: true, length: 1000, settings: settings)
        lax.start(.init(positionalFile: false))
        #expect(lax.progress.tick() == Progress.Runner.none)
        lax.complete(0, 30)
        #expect(lax.progress.tick() == Progress.Runner.none)
        lax.drain()
        #expect(lax.calls.isEmpty, "30 bytes stay below low water on a non-strict tick")
        lax.complete(1, 0)  // EOF ends it
        #expect(lax.progress.tick() == nil, "the timer stops once the operation is over")
        lax.drain()
        #expect(lax.calls == [HandlerCall(done: false, data: fileBytes(0..<30), error: nil), HandlerCall(done: true, data: [], error: nil)])
    }

    @Test("stop before start: withdrawn, one (true, nil, ECANCELED) for a read, (true, all data, ECANCELED) for a write")
    func stopBeforeStart() {
        var read = Driver(.read, length: 100)
        #expect(read.progress.stop() == .withdraw)
        read.progress.canceledBeforeStart()
        read.finish(ranOnEntry: false)
        read.drain()
        #expect(read.calls == [HandlerCall(done: true, data: nil, error: .canceled)])
        #expect(read.finishStep == Progress.FinishStep())

        let data = DataChunk(fileBytes(0..<64))
        var write = Driver(.write, length: 64, data: data)
        #expect(write.progress.stop() == .withdraw)
        #expect(write.progress.stop() == Progress.StopAction.none, "a second stop does nothing")
        write.progress.canceledBeforeStart()
        write.finish(ranOnEntry: false)
        write.drain()
        #expect(write.calls == [HandlerCall(done: true, data: fileBytes(0..<64), error: .canceled)])
    }

    @Test("stop with requests in flight: cancel them, keep the bytes delivered, end with ECANCELED")
    func stopInFlight() {
        var d = Driver(.read, length: 16 * 4096, settings: Driver.small)
        d.start()
        d.complete(0, 4096)
        d.drain()
        #expect(d.calls.count == 1)
        let openedBefore = d.opened
        #expect(d.progress.stop() == .cancelInFlight)
        d.complete(1, -ECANCELED)
        d.complete(2, 4096)  // past the cancelled slot: its bytes are not delivered
        d.complete(3, -ECANCELED)
        d.complete(4, -ECANCELED)
        #expect(d.opened == openedBefore, "nothing new is issued once stopped")
        d.drain()
        #expect(d.calls == [HandlerCall(done: false, data: fileBytes(0..<4096), error: nil),
                            HandlerCall(done: true, data: nil, error: .canceled)])
    }

    @Test("stop with nothing in flight (read-ahead waits for the handler): it ends at once")
    func stopIdle() {
        var options = OperationOptions()
        options.bufferLimit = 4096
        var d = Driver(.read, length: 16 * 4096, settings: Driver.small, options: options)
        d.start()
        #expect(d.opened == [0])
        d.complete(0, 4096)
        #expect(d.opened == [0], "the buffer limit holds the next read back")
        #expect(d.progress.stop() == .finish)
        d.finish(ranOnEntry: true)
        d.drain()
        #expect(d.calls == [HandlerCall(done: false, data: fileBytes(0..<4096), error: nil),
                            HandlerCall(done: true, data: nil, error: .canceled)])
    }

    @Test("EOF in the middle of the range: the bytes, then (true, empty, nil)")
    func endOfFile() {
        var d = Driver(.read, length: 4 * 4096, settings: Driver.small)
        d.start()
        d.complete(3, 0)
        d.complete(2, 0)
        d.complete(1, 100)
        #expect(d.again == [.rest(1)], "a short read goes on where it stopped")
        #expect(d.progress.requestRange(of: 1)! == (offset: 4096 + 100, bytes: 100..<4096))
        d.complete(1, 0)
        d.complete(0, 4096)
        d.drain()
        #expect(d.calls == [HandlerCall(done: false, data: fileBytes(0..<4096), error: nil),
                            HandlerCall(done: false, data: fileBytes(4096..<4196), error: nil),
                            HandlerCall(done: true, data: [], error: nil)])
    }

    @Test("an error after some bytes: (false, bytes, nil), then (true, nil, error)")
    func errorAfterBytes() {
        var d = Driver(.read, length: 4 * 4096, settings: Driver.small)
        d.start()
        d.complete(1, -EIO)
        d.complete(0, 4096)
        d.complete(2, 4096)
        d.complete(3, 4096)
        d.drain()
        #expect(d.calls == [HandlerCall(done: false, data: fileBytes(0..<4096), error: nil),
                            HandlerCall(done: true, data: nil, error: .ioError)])
    }

    @Test("a write error reports exactly the bytes not written, from the first one missing")
    func writeError() {
        let data = DataChunk(fileBytes(0..<(4 * 4096)))
        var d = Driver(.write, length: 4 * 4096, data: data, settings: Driver.small)
        d.start()
        #expect(d.host.made.map(\.fill) == (0..<4).map { .write(piece: ($0 * 4096)..<(($0 + 1) * 4096)) })
        d.complete(0, 4096)
        d.complete(1, 1000)
        #expect(d.again == [.rest(1)], "a short write goes on")
        #expect(d.progress.requestRange(of: 1)! == (offset: 4096 + 1000, bytes: 1000..<4096))
        d.complete(2, 4096)
        d.complete(3, 4096)
        d.complete(1, -ENOSPC)
        d.drain()
        #expect(d.calls.first == HandlerCall(done: false, data: fileBytes(4096..<(4 * 4096)), error: nil),
                "after slot 0: what is left, by the low-water rule")
        #expect(d.calls.last == HandlerCall(done: true, data: fileBytes((4096 + 1000)..<(4 * 4096)), error: .noSpace))
        #expect(d.calls.count == 2)
    }

    @Test("a short write goes on; a write that moves nothing fails with EIO")
    func shortWrite() {
        let data = DataChunk(fileBytes(0..<100))
        var d = Driver(.write, stream: true, length: 100, data: data)
        d.start(.init(positionalFile: false))
        d.complete(0, 60)
        #expect(d.again == [.rest(0)])
        #expect(d.progress.requestRange(of: 0)! == (offset: -1, bytes: 60..<100), "a pipe: at the file position")
        d.complete(0, 40)
        d.drain()
        #expect(d.calls == [HandlerCall(done: true, data: nil, error: nil)])

        var stuck = Driver(.write, stream: true, length: 100, data: data)
        stuck.start(.init(positionalFile: false))
        stuck.complete(0, 0)
        stuck.drain()
        #expect(stuck.calls == [HandlerCall(done: true, data: fileBytes(0..<100), error: .ioError)])
    }

    @Test("EAGAIN on a non-blocking fd: poll for readiness, then read again")
    func eagainPolls() {
        var d = Driver(.read, stream: true, length: 100)
        d.start(.init(positionalFile: false))
        d.complete(0, -EAGAIN)
        #expect(d.again == [.poll(0, forReading: true)])
        #expect(d.progress.inFlight == 1, "the poll is in flight")
        d.note(d.progress.polled(0, Int32(POLLIN), host: d.host))
        #expect(d.again == [.poll(0, forReading: true), .rest(0)])
        d.complete(0, 100)
        d.drain()
        #expect(d.calls == [HandlerCall(done: true, data: fileBytes(0..<100), error: nil)])

        var w = Driver(.write, stream: true, length: 10, data: DataChunk(fileBytes(0..<10)))
        w.start(.init(positionalFile: false))
        w.complete(0, -EAGAIN)
        #expect(w.again == [.poll(0, forReading: false)])
        w.note(w.progress.polled(0, -EPIPE, host: w.host))
        w.drain()
        #expect(w.calls == [HandlerCall(done: true, data: fileBytes(0..<10), error: .brokenPipe)])
    }

    @Test("bufferLimit bounds the read-ahead: bytes in flight plus delivered and not handled")
    func bufferLimit() {
        var options = OperationOptions()
        options.bufferLimit = 3 * 4096
        var d = Driver(.read, length: 64 * 4096, settings: Driver.small, options: options)
        d.start()
        #expect(d.opened == [0, 1, 2], "three 4 KiB reads fill a 12 KiB limit")
        for id in 0..<3 { d.complete(id, 4096) }
        #expect(d.opened == [0, 1, 2], "delivered but not handled: still counted")
        #expect(d.progress.readAheadBytes == 3 * 4096)
        #expect(d.progress.queuedBytes == 3 * 4096)
        let first = d.progress.nextDelivery()!
        #expect(Array(first.data!) == fileBytes(0..<4096))
        d.opened += Array(d.progress.handlerReturned(first, host: d.host))
        #expect(d.opened == [0, 1, 2, 3], "one handled: one more read")

        // The engine's read budget: no buffer, no read; it goes on when granted.
        var budget = Driver(.read, length: 64 * 4096, settings: Driver.small)
        budget.host.budget = 2
        budget.start()
        #expect(budget.opened == [0, 1])
        budget.host.budget = 1
        budget.opened += Array(budget.progress.issue(host: budget.host))
        #expect(budget.opened == [0, 1, 2])
    }

    @Test("manualCredit: handled bytes still count until released; a release resumes reading")
    func manualCredit() {
        var options = OperationOptions()
        options.bufferLimit = 2 * 4096
        options.manualCredit = true
        var d = Driver(.read, length: 64 * 4096, settings: Driver.small, options: options)
        d.start()
        #expect(d.opened == [0, 1])
        d.complete(0, 4096)
        d.complete(1, 4096)
        d.drain()
        #expect(d.calls.count == 2)
        #expect(d.opened == [0, 1], "the handler returned, but nothing was released")
        d.opened += Array(d.progress.release(4096, host: d.host))
        #expect(d.opened == [0, 1, 2])
        d.opened += Array(d.progress.release(4096, host: d.host))
        #expect(d.opened == [0, 1, 2, 3])
    }

    @Test("a stream operation on a file: the position is set before its last call is queued")
    func positionBeforeFinalCall() {
        var d = Driver(.read, stream: true, length: 3000)
        d.host.position = .success(1000)
        d.start()
        #expect(d.progress.requestRange(of: 0)!.offset == 1000, "it starts at the file position")
        d.complete(0, 3000)
        #expect(d.finishStep == Progress.FinishStep(truncate: nil, position: 4000))
        #expect(d.queuedBeforeFinalStep == 0, "no call is queued before the position is set")
        d.drain()
        // (The fake slots' bytes are numbered from the start of the I/O range.)
        #expect(d.calls == [HandlerCall(done: true, data: fileBytes(0..<3000), error: nil)])

        // A random operation never moves the position; neither does one
        // withdrawn before it ran.
        var random = Driver(.read, length: 10)
        random.start(.init(channelBase: 50))
        #expect(random.progress.requestRange(of: 0)!.offset == 50)
        random.complete(0, 10)
        #expect(random.finishStep == Progress.FinishStep())

        var failed = Driver(.read, stream: true, length: 10)
        failed.host.position = .failure(.badFileDescriptor)
        failed.start()
        failed.drain()
        #expect(failed.calls == [HandlerCall(done: true, data: nil, error: .badFileDescriptor)])
        #expect(failed.finishStep == Progress.FinishStep(), "no position was taken: none is set")
    }

    @Test("the entry hears of the end only once the runner another thread scheduled is on the queue")
    func entryAfterRunnerQueued() {
        var d = Driver(.read, stream: true, length: 100, settings: {
            var s = ChannelSettings()
            s.low = 1
            return s
        }())
        d.start(.init(positionalFile: false))
        let actions = d.progress.completed(0, 40, host: d.host)
        #expect(actions.runner == .schedule, "thread A must put the runner on the queue")
        // Thread B ends the operation before A has done so.
        _ = d.progress.completed(1, 0, host: d.host)
        let step = d.progress.finishIO(ranOnEntry: true)
        #expect(step != nil)
        let (runner, tellEntry) = d.progress.queueFinalDeliveries(tellEntry: true)
        #expect(runner == Progress.Runner.none, "the runner is already scheduled")
        #expect(!tellEntry, "B must not tell the entry yet")
        let told = d.progress.runnerQueued()
        #expect(told, "A tells it once its runner is queued")
        d.drain()
        #expect(d.calls == [HandlerCall(done: false, data: fileBytes(0..<40), error: nil), HandlerCall(done: true, data: [], error: nil)])
    }

    @Test("direct I/O: a partial block inside the file is read, merged and written; past the end it is cut back")
    func directReadModifyWrite() {
        let alignment = DirectAlignment(memory: 512, offset: 4096)
        let data = DataChunk(fileBytes(0..<50))
        var inside = Driver(.write, length: 50, data: data)
        inside.host.length = 8192
        inside.progress = Progress(direction: .write, isStream: false, settings: ChannelSettings(),
                                   options: OperationOptions(), offset: 100, length: 50, data: data)
        inside.start(.init(directAlignment: alignment))
        #expect(inside.host.made == [NewSlot(id: 0, start: 0, size: 4096,
                                             fill: .directPartial(piece: 0..<50, at: 100, prefill: true),
                                             memoryAlignment: 512)])
        inside.complete(0, 4096)
        #expect(inside.again == [.readModifyWrite(0, read: 4096)])
        inside.complete(0, 4096)
        inside.drain()
        #expect(inside.calls == [HandlerCall(done: true, data: nil, error: nil)])
        #expect(inside.finishStep == Progress.FinishStep(), "the file keeps its length")

        var past = Driver(.write, length: 50, data: data)
        past.host.length = 0
        past.progress = Progress(direction: .write, isStream: false, settings: ChannelSettings(),
                                 options: OperationOptions(), offset: 100, length: 50, data: data)
        past.start(.init(directAlignment: alignment))
        #expect(past.host.made.map(\.fill) == [.directPartial(piece: 0..<50, at: 100, prefill: false)])
        past.complete(0, 4096)
        #expect(past.finishStep == Progress.FinishStep(truncate: 150, position: nil),
                "the whole block was written: cut back to the user's end")

        var writeOnly = Driver(.write, length: 50, data: data)
        writeOnly.host.length = 8192
        writeOnly.progress = Progress(direction: .write, isStream: false, settings: ChannelSettings(),
                                      options: OperationOptions(), offset: 100, length: 50, data: data)
        writeOnly.start(.init(writeOnly: true, directAlignment: alignment))
        writeOnly.drain()
        #expect(writeOnly.host.made.isEmpty, "nothing is written")
        #expect(writeOnly.calls == [HandlerCall(done: true, data: fileBytes(0..<50), error: .badFileDescriptor)])
    }
}
