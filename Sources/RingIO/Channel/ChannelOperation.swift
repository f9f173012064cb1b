#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine

/// A channel's water marks and interval, as an operation snapshots them.
struct ChannelSettings: Sendable {
    var high: Int = .max
    /// `nil`: the default (see `effectiveLow`).
    var low: Int?
    var interval: Duration?
    var strictInterval = false
    /// `IOChannel.setDirectIO`: with `.required`, an operation on a file
    /// not in direct-I/O mode fails with `EINVAL`.
    var directIO: IOChannel.DirectIO = .off

    /// The most bytes one handler call delivers: the high-water mark, and
    /// with the default low-water mark on files, one chunk.
    func deliverySize(positional: Bool) -> Int {
        let high = Swift.max(self.high, 1)
        return low == nil && positional ? Swift.min(high, IOChannel.chunkSize) : high
    }

    /// The low-water mark in force: the one set, else per chunk on files
    /// (min(high, chunk size)) and per read on pipes, sockets and ttys.
    func effectiveLow(positional: Bool) -> Int {
        if let low { return Swift.max(low, 1) }
        return positional ? Swift.min(high, IOChannel.chunkSize) : 1
    }
}

/// How an operation hands its results over, beyond the channel's settings.
struct OperationOptions: Sendable {
    /// The one-shot read on a pipe or socket: end once some bytes arrived.
    var endAfterFirstBytes = false
    /// Call the handler on the thread that completed the request instead of
    /// on the queue: for the async API, whose handler only resumes a task.
    /// The handler must be short and must not block.
    var inline = false
    /// Bytes handed to the handler count against `bufferLimit` until
    /// `release(_:)` says the consumer took them (the chunk sequence), not
    /// until the handler returns.
    var manualCredit = false
    /// The most bytes in flight plus delivered and not yet handled (or
    /// released) before reading pauses.
    var bufferLimit = ChannelOperation.maxBufferedBytes
}

/// One read or write of a channel: cuts its range into requests, keeps a
/// bounded number in flight, puts the results back in file order and hands
/// them to the handler by the water-mark and interval rules.
///
/// ```
///   file:   |---- slot 0 ----|---- slot 1 ----|---- slot 2 ----|-- ...
///            done, delivered   in flight        in flight       not issued
///                          ▲
///                          transferred (contiguous bytes done, in order)
/// ```
///
/// Positional operations (random channels, stream channels on regular files)
/// keep up to `maxInFlight` requests of `chunkSize` bytes in flight at
/// explicit offsets; a stream operation reads the file position when it
/// starts and moves it when it ends. On pipes, sockets and ttys one request
/// is in flight at a time, at the file position.
///
/// Memory is bounded: no new read is issued while the bytes in flight plus
/// the bytes delivered but not yet handled reach `maxBufferedBytes`, so a slow
/// handler slows reading down.
// @unchecked: the `let`s are immutable; every `var` is read and written only
// with `lock` held, except `entry`, `channelBase` and `lane`, written once by
// the channel before the operation is enqueued and only read afterwards, and
// `ticket`, which belongs to the entry's lock. (The state is internal, not private,
// only so that ChannelOperation+Completion.swift and +Direct.swift reach it.)
final class ChannelOperation: SchedulableOperation, @unchecked Sendable {
    enum Direction { case read, write }

    /// A stream write on a regular file (not `O_APPEND`) that goes out as one
    /// request and has no interval: it may go out in one `pwritev` with the
    /// stream writes queued next to it (`CoalescedWrite`). Such a write makes
    /// exactly one handler call, its last, and the entry queues those in
    /// submission order, so coalescing changes no handler sequence.
    var isPipelinableWrite: Bool {
        isStream && direction == .write && settings.interval == nil
            && length <= Swift.min(IOChannel.chunkSize, Swift.max(settings.high, 4096))
            && entry.map { entry in
                entry.kind.isPositional && !entry.appendMode
                    // Direct I/O: whole blocks only (the entry checks the position).
                    && entry.directAlignment.map { length % $0.offset == 0 } ?? true
            } ?? false
    }

    /// A write in direct-I/O mode that may read-modify-write a block (a
    /// random write with an unaligned end, or a stream write that would not
    /// start and end aligned at `streamPosition`, or whose position is not
    /// known yet): it runs alone on its entry. Asked by the entry, under its
    /// lock, before the operation starts.
    func needsExclusiveRun(_ alignment: DirectAlignment, streamPosition: Int64?) -> Bool {
        guard direction == .write else { return false }
        let a = Int64(alignment.offset)
        let start: Int64
        if isStream {
            guard let streamPosition else { return true }
            start = streamPosition
        } else {
            start = channelBase &+ userOffset
        }
        return start % a != 0 || (start &+ Int64(length)) % a != 0
    }

    static let maxInFlight = 4
    static let maxDirectInFlight = 8
    static let maxBufferedBytes = 8 * IOChannel.chunkSize

    let direction: Direction
    let isStream: Bool
    let queue: IOQueue
    let engine: IOEngine
    let handler: IOChannel.Handler
    let settings: ChannelSettings
    let userOffset: Int64
    let length: Int
    let data: DataChunk
    let options: OperationOptions
    weak var channel: ChannelCore?

    var entry: FDEntry?
    var channelBase: Int64 = 0
    var lane: Int = 0
    /// The entry's scheduling state of this operation: read and written only
    /// under the entry's lock (`EntryScheduler`).
    var ticket = SchedulerTicket()

    enum End {
        case complete, endOfFile, failed(Errno)
    }

    struct Delivery {
        let done: Bool
        let data: DataChunk?
        let error: Errno?
        let bytes: Int
    }

    /// One request's range and buffer, in file order.
    // @unchecked: a slot is read and written only with its operation's lock
    // held; its buffer's bytes only by the one request in flight on them.
    final class Slot: @unchecked Sendable {
        let start: Int
        let size: Int
        var done = 0
        var complete = false
        var endOfFile = false
        var error: Errno?
        var request: IORequest?
        /// Reads: where the bytes land. Direct writes: the aligned copy of
        /// the bytes (and of a read-modify-write's block).
        let buffer: ReadBuffer?
        /// Writes: the bytes of this slot (of the user's range).
        let piece: DataChunk
        var iovecs: UnsafeMutablePointer<iovec>?
        /// A direct write's block is being read, for a read-modify-write.
        var prefill = false

        init(start: Int, size: Int, buffer: ReadBuffer?, piece: DataChunk) {
            self.start = start
            self.size = size
            self.buffer = buffer
            self.piece = piece
        }

        deinit { iovecs?.deallocate() }
    }

    let lock = PlainLock()
    var started = false
    var stopped = false
    var ioDone = false
    /// It went out in a coalesced `pwritev` (`CoalescedWrite`), which
    /// reports its result; a stop no longer reaches it.
    var coalesced = false
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
    /// A read cut at the largest file offset (`limitToLargestOffsetLocked`):
    /// it ends there as at the end of the file.
    var cutAtLargestOffset = false
    /// A direct write with partial blocks: the file's length when it started
    /// (a block wholly past it needs no read).
    var lengthAtStart: Int64 = .max
    var slots: [Slot] = []
    var issued = 0
    var transferred = 0
    var inFlight = 0
    var end: End?
    var undelivered = DataChunk.empty
    var writeDeliveredAt = 0
    var queuedBytes = 0
    var handledBytes = 0
    var deliveries = RingBuffer<Delivery>(initialCapacity: 2)
    var runnerActive = false
    /// Waiting for read-buffer bytes (see ChannelOperation+Budget.swift).
    var budgetTicket: ReadBudget.Ticket?
    var budgetGranted = 0

    init(direction: Direction, isStream: Bool, queue: IOQueue, engine: IOEngine,
         settings: ChannelSettings, offset: Int64, length: Int, data: DataChunk,
         options: OperationOptions = .init(), channel: ChannelCore?, handler: @escaping IOChannel.Handler) {
        self.channel = channel
        self.direction = direction
        self.isStream = isStream
        self.queue = queue
        self.engine = engine
        self.settings = settings
        self.userOffset = offset
        self.length = length
        self.data = data
        self.options = options
        self.handler = handler
    }

    // MARK: - life cycle

    /// Queues the operation on `entry` (the channel's lock is held).
    func enqueue(on entry: FDEntry, base: Int64) -> [FDEntry.Item] {
        self.entry = entry
        self.channelBase = base
        self.lane = entry.lane(isRead: direction == .read)
        return entry.enqueue(self)
    }

    /// Ends an operation that never reached an entry (closed or failed
    /// channel, empty range): its one and only handler call.
    func finishWithoutIO(_ error: Errno?) {
        let schedule = lock.withLock { () -> Bool in
            ioDone = true
            started = true
            switch direction {
            case .read:
                return enqueueLocked(Delivery(done: true, data: error == nil ? .empty : nil, error: error, bytes: 0))
            case .write:
                let rest: DataChunk? = error == nil ? nil : data
                return enqueueLocked(Delivery(done: true, data: rest, error: error, bytes: 0))
            }
        }
        if schedule { runInlineDeliveries() }
    }

    /// The entry says it is this operation's turn.
    func start() {
        guard let entry else { return }
        var requests: [IORequest] = []
        var finishNow = false
        lock.lock()
        started = true
        if stopped {
            end = .failed(.canceled)
        } else {
            let random = !isStream
            positional = random || (entry.kind.isPositional && !(direction == .write && entry.appendMode))
            inFlightLimit = positional && entry.kind.isPositional ? Self.maxInFlight : 1
            // Requests of the high-water mark, capped by the chunk size (and
            // at least a page): a write reports its progress per request.
            // (`isPipelinableWrite` relies on this size.)
            requestSize = Swift.min(IOChannel.chunkSize, Swift.max(settings.high, 4096))
            if random {
                let (sum, overflow) = channelBase.addingReportingOverflow(userOffset)
                if overflow || sum < 0 { end = .failed(.invalidArgument) } else { fileBase = sum }
            } else if positional {
                let position = lseek(entry.fd, 0, SEEK_CUR)
                if position < 0 {
                    end = .failed(Errno(rawValue: cliburing_errno()))
                } else {
                    fileBase = Int64(position)
                    positionTaken = true
                }
            }
            ioLength = length
            userEnd = length
            if end == nil {
                let alignment = positional ? entry.directAlignment : nil
                if let alignment {
                    alignToBlocksLocked(alignment)
                    // The device, not a copy, bounds a direct read: more
                    // requests in flight keep it busy (fio's ceiling here
                    // needs 8). Still within `bufferLimit`.
                    if direction == .read && inFlightLimit > 1 { inFlightLimit = Self.maxDirectInFlight }
                } else if settings.directIO == .required {
                    end = .failed(.invalidArgument)
                }
                if end == nil && positional { limitToLargestOffsetLocked() }
                if end == nil && entry.writeOnly && needsBlockReadLocked() {
                    // The read-modify-write cannot read the block back: fail
                    // before any byte is written, so that all of them are
                    // truly unwritten.
                    end = .failed(.badFileDescriptor)
                }
            }
            if end == nil {
                if let interval = settings.interval {
                    IntervalTimers.shared.schedule(every: interval) { [weak self] in self?.tick() ?? false }
                }
                requests = makeRequestsLocked()
            }
        }
        finishNow = end != nil && inFlight == 0
        lock.unlock()
        if finishNow {
            finishIO()
        } else {
            submit(requests)
        }
    }

    /// `close(stop: true)`: cancels what is in flight; a queued operation
    /// ends at once with `.canceled`.
    func stop() {
        let (wasStarted, inFlightRequests, finishNow) = lock.withLock { () -> (Bool, [IORequest], Bool) in
            if stopped || ioDone { return (true, [], false) }
            stopped = true
            withdrawFromBudgetLocked()
            if coalesced { return (true, [], false) }
            // Nothing in flight (read-ahead waits for the handler): end now.
            if started && inFlight == 0 && end == nil {
                _ = advanceLocked()
                return (true, [], end != nil)
            }
            return (started, slots.compactMap { $0.request }, false)
        }
        if finishNow {
            finishIO()
            return
        }
        if !wasStarted, let entry, entry.removeIfPending(self) {
            lock.withLock {
                started = true
                end = .failed(.canceled)
            }
            finishIO(ranOnEntry: false)
            return
        }
        for request in inFlightRequests { engine.cancel(request) }
    }

    /// Bytes requested from the file but not yet handled by the handler
    /// (for tests of the read-ahead bound).
    var readAheadBytes: Int { lock.withLock { issued - handledBytes } }

    // MARK: - requests

    var mayBlock: Bool { entry?.kind.mayBlock ?? false }

    /// With the lock held: new requests while the limits allow.
    func makeRequestsLocked() -> [IORequest] {
        guard started, !stopped, end == nil, let entry else { return [] }
        var out: [IORequest] = []
        // `slots` holds every request not yet taken in file order, in flight
        // or done early: bounding it bounds the buffers, however the
        // completions are ordered.
        while slots.count < inFlightLimit {
            let remaining = ioLength - issued
            if remaining <= 0 { break }
            let size = nextSlotSizeLocked(remaining: remaining)
            let slot: Slot
            switch direction {
            case .read:
                if queuedBytes + slots.count * requestSize >= options.bufferLimit { return out }
                let alignment = direct?.memory ?? 0
                // Reads that may wait for a peer (pipes, sockets) stay out
                // of the budget: idle ones must not starve file reads.
                let footprint = mayBlock ? 0 : ReadBuffer.footprint(capacity: size, pool: BufferPool.shared,
                                                                     alignment: alignment)
                guard footprint == 0 || takeBudgetLocked(footprint) else { return out }
                let buffer = ReadBuffer(capacity: size, pool: BufferPool.shared, alignment: alignment,
                                        budget: engine.readBudget, charge: footprint)
                slot = Slot(start: issued, size: size, buffer: buffer, piece: .empty)
            case .write:
                if let direct {
                    slot = directWriteSlotLocked(start: issued, size: size, alignment: direct)
                } else {
                    slot = Slot(start: issued, size: size, buffer: nil, piece: data.subrange(issued..<(issued + size)))
                }
            }
            issued += size
            slots.append(slot)
            out.append(makeRequestLocked(slot, fd: entry.fd))
        }
        return out
    }

    /// With the lock held: the request for what is left of `slot`.
    func makeRequestLocked(_ slot: Slot, fd: Int32) -> IORequest {
        let offset: Int64 = positional ? fileBase + Int64(slot.start + slot.done) : -1
        let operation: IORequest.Operation
        var fixedBuffer: RegisteredBuffer?
        if direction == .read || slot.prefill {
            let buffer = slot.buffer!
            operation = .read(fd: fd, buffer: UnsafeMutableRawBufferPointer(start: buffer.pointer + slot.done,
                                                                             count: slot.size - slot.done),
                              offset: offset)
            fixedBuffer = buffer.registered
        } else {
            let rest = slot.done == 0 ? slot.piece : slot.piece.subrange(slot.done..<slot.size)
            if let buffer = slot.buffer {
                // Direct I/O: the aligned copy.
                operation = .write(fd: fd, buffer: UnsafeRawBufferPointer(start: buffer.pointer + slot.done,
                                                                          count: slot.size - slot.done),
                                   offset: offset)
                fixedBuffer = buffer.registered
            } else if rest.regionCount == 1 {
                var region = UnsafeRawBufferPointer(start: nil, count: 0)
                rest.apply { _, _, bytes in
                    region = bytes
                    return false
                }
                operation = .write(fd: fd, buffer: region, offset: offset)
                // A chunk read by a channel: its pool buffer may be registered
                // (the region's storage says so; no cast).
                fixedBuffer = rest.soleStorage?.registered
            } else {
                let count = Swift.min(rest.regionCount, 1024 /* IOV_MAX */)
                slot.iovecs?.deallocate()
                let iovecs = UnsafeMutablePointer<iovec>.allocate(capacity: count)
                var i = 0
                rest.apply { _, _, bytes in
                    iovecs[i] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
                    i += 1
                    return i < count
                }
                slot.iovecs = iovecs
                operation = .writev(fd: fd, iovecs: iovecs, count: count, offset: offset)
            }
        }
        inFlight += 1
        let request = IORequest(operation, owner: slot, mayBlock: mayBlock, fixedBuffer: fixedBuffer,
                                fixedFile: entry?.fixedFile) { [self] res in
            completed(slot, res)
        }
        slot.request = request
        return request
    }

    func submit(_ requests: [IORequest]) {
        guard !requests.isEmpty else { return }
        if requests.count == 1 { engine.submit(requests[0]) } else { engine.submit(contentsOf: requests) }
        // A stop that came between making and submitting them found them
        // not yet in the engine: cancel them again now that they are.
        if lock.withLock({ stopped }) {
            for r in requests { engine.cancel(r) }
        }
    }
}
