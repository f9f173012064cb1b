import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// The kernel side of one slot, as the progress sees it: the shell's buffer
/// and request (`ChannelOperation.SlotIO`), a test's fake bytes.
protocol ProgressPayload {
    /// Reads: the bytes `range` of the slot, once its requests completed.
    func chunk(range: Range<Int>) -> DataChunk
}

/// What the progress asks of the file and the engine while it decides (the
/// shell answers with `lseek`, `fstat` and buffers; tests from a model).
protocol OperationProgressHost<Payload> {
    associatedtype Payload: ProgressPayload
    /// The file position now (`lseek(fd, 0, SEEK_CUR)`).
    func filePosition() -> Result<Int64, Errno>
    /// The file's length now (`fstat`), `nil` if unknown.
    func fileLength() -> Int64?
    /// The buffer (reads, direct writes) or bytes (writes) of a new slot;
    /// `nil` when a read must wait for read-budget bytes (the host then
    /// waits for them, and calls `issue` again once they are granted).
    func makeSlot(_ slot: NewSlot) -> Payload?
    /// Bytes this read handed out that wait in write queues
    /// (`ReadAheadHold`): they count against `bufferLimit` too.
    func heldInWrites() -> Int
}

extension OperationProgressHost {
    func heldInWrites() -> Int { 0 }
}

/// Whether an operation reads or writes.
package enum OperationDirection { case read, write }

/// A slot the progress opens: its I/O bytes `start..<start + size` (of the
/// I/O range, which starts at `fileBase`), and how its buffer is filled.
struct NewSlot: Equatable {
    enum Fill: Equatable {
        /// A read into a new buffer.
        case read
        /// A buffered write of the user's bytes `piece`.
        case write(piece: Range<Int>)
        /// A direct write of whole blocks, the user's bytes `piece` (as they
        /// are if aligned in memory, else copied into an aligned buffer).
        case directWhole(piece: Range<Int>)
        /// A direct write's partial block: `piece` goes at `at` in an
        /// aligned buffer of the block. `prefill`: the block is first read
        /// from the file (`Again.readModifyWrite` merges the bytes in);
        /// otherwise it lies past the end of file and the rest is zeros.
        case directPartial(piece: Range<Int>, at: Int, prefill: Bool)
    }

    let id: Int
    let start: Int
    let size: Int
    let fill: Fill
    /// Direct I/O: the alignment its buffer's address needs (0: none).
    var memoryAlignment = 0
}

/// The progress of one channel operation, as a value: how its range is cut
/// into requests (slots), how completions that come in any order are put
/// back in file order, when the water marks and the interval call for a
/// handler call, how a stop and an error end it, and what its last calls
/// are. Each transition returns what the shell (`ChannelOperation`) must do
/// once it has released its lock: issue requests, cancel them, run the
/// handler calls, set the file position, tell the entry.
///
/// ```
///   file:   |---- slot 0 ----|---- slot 1 ----|---- slot 2 ----|-- ...
///            done, delivered   in flight        in flight       not issued
///                          ▲
///                          transferred (contiguous bytes done, in order)
/// ```
///
/// Slots are named by ids, 0, 1, 2... in file order; the ones open are
/// consecutive. It knows nothing of the kernel: results are `res` values as
/// io_uring reports them (bytes, or a negated errno).
struct OperationProgress<Payload: ProgressPayload> {
    typealias Direction = OperationDirection

    enum End: Equatable {
        case complete, endOfFile, failed(Errno)
    }

    /// One handler call.
    struct Delivery {
        let done: Bool
        let data: DataChunk?
        let error: Errno?
        /// Read bytes it hands over (counted against `bufferLimit`).
        let bytes: Int
    }

    /// One request's range and state, in file order.
    struct Slot {
        let start: Int
        let size: Int
        var done = 0
        var complete = false
        var endOfFile = false
        var error: Errno?
        /// A direct write's block is being read, for a read-modify-write.
        var prefill = false
        /// The shell's side of the slot (its buffer, its request in flight).
        var payload: Payload
    }

    /// What the entry says of the file when the operation starts.
    struct StartContext {
        /// A regular file or block device.
        var positionalFile = true
        var appendMode = false
        var writeOnly = false
        /// The fd is in direct-I/O mode.
        var directAlignment: DirectAlignment?
        /// A random channel's base (its `offset`s are relative to it).
        var channelBase: Int64 = 0
    }

    /// A request again for a slot already open.
    enum Again: Equatable {
        /// The rest of a short read or write, or after `EINTR`.
        case rest(Int)
        /// `EAGAIN` on a non-blocking fd: poll for readiness (`POLLIN` for
        /// reads), then `polled`.
        case poll(Int, forReading: Bool)
        /// A direct write's block came back from the file with `read` bytes:
        /// merge the user's bytes in, then write it.
        case readModifyWrite(Int, read: Int)
    }

    /// How the handler calls queued by a transition get run.
    enum Runner: Equatable {
        /// Already running or scheduled (or nothing queued).
        case none
        /// `queue.async` the runner, then `runnerQueued()`.
        case schedule
        /// Run it on this thread (inline operations).
        case runHere
    }

    /// What a transition leaves to do, in this order: the handler runner,
    /// the requests (`again`, then the fresh slots), then the end of the I/O.
    struct Actions: Equatable {
        var runner = Runner.none
        var again: Again?
        /// Slots opened: a request each.
        var fresh: Range<Int> = 0..<0
        /// The I/O is over: `finishIO`.
        var finish = false
        /// `start`: run the interval timer (`tick`).
        var interval: Duration?
    }

    /// What `stop` leaves to do.
    enum StopAction: Equatable {
        case none
        /// Not started: withdraw it from the entry; if it was still queued,
        /// `canceledBeforeStart` and `finishIO(ranOnEntry: false)`.
        case withdraw
        /// Cancel the requests in flight (`slots`).
        case cancelInFlight
        /// Nothing was in flight: `finishIO` now.
        case finish
    }

    /// What `finishIO` leaves to do before the last handler calls are queued.
    struct FinishStep: Equatable {
        /// A read-modify-write wrote a block past the old end of file: cut
        /// the file back to this length if it is longer.
        var truncate: Int64?
        /// A stream operation on a file: set the file position here.
        var position: Int64?
    }

    static var maxInFlight: Int { 4 }
    static var maxDirectInFlight: Int { 8 }

    // MARK: - fixed at creation

    let direction: Direction
    let isStream: Bool
    let settings: ChannelSettings
    let options: OperationOptions
    let userOffset: Int64
    let length: Int
    let data: DataChunk

    // MARK: - fixed at start (by `start`)

    var positional = false
    /// A stream operation on a file read the position it starts at (and
    /// moves it when it ends).
    var positionTaken = false
    var inFlightLimit = 1
    var requestSize = IOChannel.chunkSize
    /// Where the I/O range starts in the file.
    var fileBase: Int64 = 0
    /// Direct I/O: the alignment requests keep (`nil`: buffered). The I/O
    /// range is then the user's range rounded out to it: `ioHead` bytes
    /// before the user's first byte, `ioLength` bytes in all; slots and
    /// `issued` count I/O bytes, `transferred` the user's bytes.
    var direct: DirectAlignment?
    var ioHead = 0
    var ioLength = 0
    /// Where the user's range ends, in I/O bytes (`Int.max` for "to EOF").
    var userEnd = 0
    /// A direct write read a block past the end of file: the length the
    /// file must have afterwards.
    var restoreLength: Int64?
    /// A read cut at the largest file offset: it ends there as at the end
    /// of the file.
    var cutAtLargestOffset = false
    /// A direct write with partial blocks: the file's length when it started
    /// (a block wholly past it needs no read).
    var lengthAtStart: Int64 = .max

    // MARK: - life (written only by the transitions, in these files)

    /// Where the operation is in its life (OperationProgress+Phase.swift):
    /// changed only by the transitions there.
    var phase = Phase.pending
    /// `close(stop: true)` asked to stop it. Orthogonal to the phase: a
    /// stop may come in any phase and is remembered to the end (`submit`
    /// cancels requests a stop found not yet in the engine).
    var stopped = false
    /// The slots open, in file order: in flight, or done early. Bounding
    /// them bounds the buffers, however the completions are ordered.
    var slots = InlineQueue<Slot>()
    /// The id the next slot gets.
    var nextSlotID = 0
    var issued = 0
    var transferred = 0
    /// Requests in flight (polls included).
    var inFlight = 0
    var undelivered = DataChunk.empty
    var writeDeliveredAt = 0
    /// Read bytes handed to the handler (queued or running) and not yet
    /// handled (or, with `manualCredit`, released).
    var queuedBytes = 0
    var handledBytes = 0
    var deliveries = InlineQueue<Delivery>()
    /// The handler runner is scheduled or running.
    var runnerActive = false
    /// The hand-off between a transition that asked its caller to put the
    /// runner on `queue` and the entry's notice of the end.
    var handshake = RunnerHandshake.settled

    init(direction: Direction, isStream: Bool, settings: ChannelSettings, options: OperationOptions,
         offset: Int64, length: Int, data: DataChunk) {
        self.direction = direction
        self.isStream = isStream
        self.settings = settings
        self.options = options
        self.userOffset = offset
        self.length = length
        self.data = data
    }

    /// Bytes requested from the file but not yet handled by the handler.
    var readAheadBytes: Int { issued - handledBytes }

    /// The open slot `id`, if it is still open.
    func slot(_ id: Int) -> Slot? {
        let i = id - (nextSlotID - slots.count)
        return i >= 0 && i < slots.count ? slots[offset: i] : nil
    }

    /// Lets the shell update the payload of slot `id`, if it is still open.
    @inline(__always)
    mutating func updatePayload(of id: Int, _ body: (inout Payload) -> Void) {
        guard let i = index(of: id) else { return }
        slots.modify(offset: i) { body(&$0.payload) }
    }

    func index(of id: Int) -> Int? {
        let i = id - (nextSlotID - slots.count)
        return i >= 0 && i < slots.count ? i : nil
    }

    /// Where the next request of slot `id` goes in the file (-1: at the
    /// file position, not positional) and which bytes of the slot it moves.
    func requestRange(of id: Int) -> (offset: Int64, bytes: Range<Int>)? {
        guard let slot = slot(id) else { return nil }
        return requestRange(of: slot)
    }

    /// `requestRange(of:)` of an open slot the caller holds.
    @inline(__always)
    func requestRange(of slot: Slot) -> (offset: Int64, bytes: Range<Int>) {
        let offset: Int64 = positional ? fileBase + Int64(slot.start + slot.done) : -1
        return (offset, slot.done..<slot.size)
    }

    // MARK: - start and stop

    /// The entry says it is this operation's turn.
    mutating func start(_ context: StartContext, host: some OperationProgressHost<Payload>) -> Actions {
        defer { _invariantCheck() }
        guard case .pending = phase else { illegal("start") }
        if stopped {
            phase = .ending(.failed(.canceled))
            return Actions(finish: inFlight == 0)
        }
        phase = .running
        let random = !isStream
        positional = random || (context.positionalFile && !(direction == .write && context.appendMode))
        inFlightLimit = positional && context.positionalFile ? Self.maxInFlight : 1
        requestSize = settings.requestSize
        if random {
            let (sum, overflow) = context.channelBase.addingReportingOverflow(userOffset)
            if overflow || sum < 0 { conclude(.failed(.invalidArgument)) } else { fileBase = sum }
        } else if positional {
            switch host.filePosition() {
            case .success(let position):
                fileBase = position
                positionTaken = true
            case .failure(let error):
                conclude(.failed(error))
            }
        }
        ioLength = length
        userEnd = length
        if end == nil {
            let alignment = positional ? context.directAlignment : nil
            if let alignment {
                alignToBlocks(alignment, host: host)
                // The device, not a copy, bounds a direct read: more
                // requests in flight keep it busy. Still within `bufferLimit`.
                if direction == .read && inFlightLimit > 1 { inFlightLimit = Self.maxDirectInFlight }
            } else if settings.directIO == .required {
                conclude(.failed(.invalidArgument))
            }
            if end == nil && positional { limitToLargestOffset() }
            if end == nil && context.writeOnly && needsBlockRead() {
                // The read-modify-write cannot read the block back: fail
                // before any byte is written, so that all of them are truly
                // unwritten.
                conclude(.failed(.badFileDescriptor))
            }
        }
        guard end == nil else { return Actions(finish: inFlight == 0) }
        return Actions(fresh: issue(host: host), interval: settings.interval)
    }

    /// `close(stop: true)`: cancels what is in flight; a queued operation
    /// ends at once with `.canceled`.
    mutating func stop() -> StopAction {
        defer { _invariantCheck() }
        if stopped || ioDone { return .none }
        stopped = true
        switch phase {
        case .pending:
            return .withdraw
        case .coalesced, .finished:
            return .none
        case .running where inFlight == 0:
            // Nothing in flight (read-ahead waits for the handler): end now.
            _ = advance()
            return end != nil ? .finish : .none
        case .running, .ending:
            return .cancelInFlight
        }
    }

    /// `stop` withdrew the operation before it started.
    mutating func canceledBeforeStart() {
        defer { _invariantCheck() }
        guard case .pending = phase, stopped else { illegal("canceledBeforeStart") }
        phase = .ending(.failed(.canceled))
    }

    // MARK: - issuing

    /// Opens new slots while the limits allow; returns their ids. Each has
    /// a request to issue.
    mutating func issue(host: some OperationProgressHost<Payload>) -> Range<Int> {
        defer { _invariantCheck() }
        let first = nextSlotID
        guard case .running = phase, !stopped else { return first..<first }
        while slots.count < inFlightLimit {
            let remaining = ioLength - issued
            if remaining <= 0 { break }
            let size = nextSlotSize(remaining: remaining)
            let fill: NewSlot.Fill
            switch direction {
            case .read:
                if queuedBytes + slots.count * requestSize + host.heldInWrites() >= options.bufferLimit {
                    return first..<nextSlotID
                }
                fill = .read
            case .write:
                fill = direct == nil ? .write(piece: issued..<(issued + size)) : directFill(start: issued, size: size)
            }
            let new = NewSlot(id: nextSlotID, start: issued, size: size, fill: fill, memoryAlignment: direct?.memory ?? 0)
            guard let payload = host.makeSlot(new) else {
                break
            }
            var slot = Slot(start: issued, size: size, payload: payload)
            if case .directPartial(_, _, let prefill) = fill {
                slot.prefill = prefill
                if !prefill { noteShortBlock(start: issued, size: size, read: 0) }
            }
            slots.append(slot)
            issued += size
            nextSlotID += 1
            inFlight += 1
        }
        return first..<nextSlotID
    }
}
