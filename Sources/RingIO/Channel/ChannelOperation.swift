#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

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
// `ticket`, which belongs to the entry's lock.
final class ChannelOperation: SchedulableOperation, @unchecked Sendable {
    enum Direction { case read, write }

    /// A stream write on a regular file (not `O_APPEND`) that goes out as one
    /// request and has no interval: it may start while earlier stream writes
    /// of its fd still run. Such a write makes exactly one handler call, its
    /// last, and the entry releases those in submission order, so pipelining
    /// changes no handler sequence.
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
    /// A stream write started while earlier writes of its lane still run:
    /// the offset the entry assigned it (where the earlier ones will end).
    /// Copied from the ticket by `start()`, under the operation's lock.
    private var pipelineBase: Int64?

    private enum End {
        case complete, endOfFile, failed(Errno)
    }

    private struct Delivery {
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

    private let lock = PlainLock()
    private var started = false
    private var stopped = false
    private var ioDone = false
    private var positional = false
    /// A stream operation on a file read the position it starts at (and
    /// moves it when it ends).
    private var positionTaken = false
    private var inFlightLimit = 1
    private var requestSize = IOChannel.chunkSize
    /// Where the I/O range starts in the file.
    private var fileBase: Int64 = 0
    /// Direct I/O: the alignment requests keep (`nil`: buffered). The I/O
    /// range is then the user's range rounded out to it: `ioHead` bytes
    /// before the user's first byte, `ioLength` bytes in all; slots and
    /// `issued` count I/O bytes, `transferred` the user's bytes.
    private var direct: DirectAlignment?
    private var ioHead = 0
    private var ioLength = 0
    /// Where the user's range ends, in I/O bytes (`Int.max` for "to EOF").
    private var userEnd = 0
    /// A direct write read a block past the end of file: the length the
    /// file must have afterwards.
    private var restoreLength: Int64?
    /// A read cut at the largest file offset (`limitToLargestOffsetLocked`):
    /// it ends there as at the end of the file.
    private var cutAtLargestOffset = false
    /// A direct write with partial blocks: the file's length when it started
    /// (a block wholly past it needs no read).
    private var lengthAtStart: Int64 = .max
    private var slots: [Slot] = []
    private var issued = 0
    private var transferred = 0
    private var inFlight = 0
    private var end: End?
    private var undelivered = DataChunk.empty
    private var writeDeliveredAt = 0
    private var queuedBytes = 0
    private var handledBytes = 0
    private var deliveries = RingBuffer<Delivery>(initialCapacity: 2)
    private var runnerActive = false

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
        let assignedBase = isStream ? entry.pipelineBase(of: self) : nil
        lock.lock()
        pipelineBase = assignedBase
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
            } else if let pipelineBase {
                fileBase = pipelineBase
                positionTaken = true
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

    private var mayBlock: Bool { entry?.kind.mayBlock ?? false }

    /// With the lock held: new requests while the limits allow.
    private func makeRequestsLocked() -> [IORequest] {
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
                let buffer = ReadBuffer(capacity: size, pool: BufferPool.shared, alignment: direct?.memory ?? 0)
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
    private func makeRequestLocked(_ slot: Slot, fd: Int32) -> IORequest {
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
                // A chunk read by a channel: its pool buffer may be registered.
                fixedBuffer = (rest.soleStorage as? ReadBuffer)?.registered
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

    /// With the lock held, at start: a range that reaches past the largest
    /// file offset (`Int64.max`). A read is cut there: it ends at the end of
    /// the file, which no file has beyond it. A write fails with `EINVAL`
    /// before any byte is written, as `pwrite` does when the offset plus the
    /// length overflows.
    private func limitToLargestOffsetLocked() {
        let room = Int64.max - fileBase  // fileBase >= 0: no overflow
        guard Int64(ioLength) > room else { return }
        switch direction {
        case .read:
            let limit = Int(room)
            ioLength = direct.map { limit / $0.offset * $0.offset } ?? limit
            cutAtLargestOffset = true
            if ioLength == 0 { end = .endOfFile }
        case .write:
            end = .failed(.invalidArgument)
        }
    }

    // MARK: - direct I/O

    /// With the lock held, at start: rounds the range out to `alignment`.
    private func alignToBlocksLocked(_ alignment: DirectAlignment) {
        direct = alignment
        let a = alignment.offset
        let start = fileBase - fileBase % Int64(a)
        ioHead = Int(fileBase - start)
        fileBase = start
        // "To the end of file" (Int.max) stays unbounded.
        let (end, overflow) = ioHead.addingReportingOverflow(length)
        userEnd = overflow || end > Int.max - a ? Int.max : end
        ioLength = userEnd == Int.max ? Int.max / a * a : (userEnd + a - 1) / a * a
        requestSize = Swift.max(a, requestSize / a * a)
        if direction == .write && (ioHead != 0 || userEnd != ioLength), let entry {
            // The operation runs alone on its fd (`needsExclusiveRun`): the
            // length cannot change under it.
            var st = stat()
            if fstat(entry.fd, &st) == 0 { lengthAtStart = Int64(st.st_size) }
        }
    }

    /// With the lock held, at start: a direct write has a partial block
    /// inside the file, which must be read for a read-modify-write.
    private func needsBlockReadLocked() -> Bool {
        guard direction == .write, let direct else { return false }
        let a = direct.offset
        let head = ioHead != 0 && fileBase < lengthAtStart
        let tail = userEnd != ioLength && fileBase &+ Int64(ioLength - a) < lengthAtStart
        return head || tail
    }

    /// With the lock held: the size of the next slot. A direct write's
    /// partial first and last blocks get slots of their own, one block each,
    /// so that only they are read for the read-modify-write.
    private func nextSlotSizeLocked(remaining: Int) -> Int {
        var size = Swift.min(requestSize, remaining)
        guard direction == .write, let direct else { return size }
        let a = direct.offset
        if issued == 0 && ioHead != 0 { return a }
        if userEnd < ioLength && remaining > a && size > remaining - a { size = remaining - a }
        return size
    }

    /// With the lock held: a direct write's slot. Bytes already aligned in
    /// memory go as they are; others are copied into an aligned buffer; a
    /// block the user's range covers only in part is read first
    /// (`readModifyWriteLocked` puts the bytes in).
    private func directWriteSlotLocked(start: Int, size: Int, alignment: DirectAlignment) -> Slot {
        let lower = Swift.max(start, ioHead)
        let upper = Swift.min(start + size, userEnd)
        let piece = data.subrange((lower - ioHead)..<(upper - ioHead))
        let partial = lower > start || upper < start + size
        if !partial, piece.regionCount == 1,
           piece.withUnsafeBytes({ Int(bitPattern: $0.baseAddress) % alignment.memory == 0 }) {
            return Slot(start: start, size: size, buffer: nil, piece: piece)
        }
        let buffer = ReadBuffer(capacity: size, pool: BufferPool.shared,
                                alignment: alignment.memory)
        let slot = Slot(start: start, size: size, buffer: buffer, piece: piece)
        if partial && fileBase + Int64(start) < lengthAtStart {
            slot.prefill = true
        } else if partial {
            mergeLocked(slot, read: 0)  // past the end of file: nothing to read
        } else {
            _ = piece.copyBytes(to: UnsafeMutableRawBufferPointer(start: buffer.pointer, count: size), from: 0..<size)
        }
        return slot
    }

    /// With the lock held: a direct write's block came back from the file
    /// (`read` bytes of it; fewer at the end of file): the user's bytes go
    /// into it, and the request that writes it back is returned.
    private func readModifyWriteLocked(_ slot: Slot, read: Int, fd: Int32) -> IORequest {
        slot.prefill = false
        mergeLocked(slot, read: read)
        return makeRequestLocked(slot, fd: fd)
    }

    /// With the lock held: puts the user's bytes into a partial block of
    /// which `read` bytes came from the file (zeros after them).
    private func mergeLocked(_ slot: Slot, read: Int) {
        let buffer = slot.buffer!
        if read < slot.size {
            (buffer.pointer + read).initializeMemory(as: UInt8.self, repeating: 0, count: slot.size - read)
            // The block reached past the end of file: the write must not
            // leave the file longer than the old end or the user's end.
            let oldEnd = fileBase + Int64(slot.start + read)
            let wanted = Swift.max(oldEnd, fileBase + Int64(userEnd))
            restoreLength = Swift.max(restoreLength ?? 0, wanted)
        }
        let at = Swift.max(slot.start, ioHead) - slot.start
        _ = slot.piece.copyBytes(to: UnsafeMutableRawBufferPointer(start: buffer.pointer + at, count: slot.piece.count),
                                 from: 0..<slot.piece.count)
    }

    private func submit(_ requests: [IORequest]) {
        guard !requests.isEmpty else { return }
        if requests.count == 1 { engine.submit(requests[0]) } else { engine.submit(contentsOf: requests) }
        // A stop that came between making and submitting them found them
        // not yet in the engine: cancel them again now that they are.
        if lock.withLock({ stopped }) {
            for r in requests { engine.cancel(r) }
        }
    }

    // MARK: - completions (on the engine's thread: short, never blocking)

    private func completed(_ slot: Slot, _ res: Int32) {
        var requests: [IORequest] = []
        lock.lock()
        inFlight -= 1
        slot.request = nil
        let fd = entry!.fd
        if slot.prefill {
            if res >= 0 && !stopped && end == nil {
                requests.append(readModifyWriteLocked(slot, read: Int(res), fd: fd))
            } else {
                slot.prefill = false
                slot.error = res < 0 ? Errno(rawValue: -res) : .canceled
                slot.complete = true
            }
        } else if res > 0 {
            slot.done += Int(res)
            // Direct I/O continues only at an aligned offset: a read that
            // stopped elsewhere reached the end of file.
            let aligned = direct.map { slot.done % $0.offset == 0 } ?? true
            if slot.done < slot.size && !stopped && end == nil && (positional || direction == .write) && aligned {
                requests.append(makeRequestLocked(slot, fd: fd))  // continue a short read or write
            } else {
                if slot.done < slot.size && !aligned {
                    if direction == .read { slot.endOfFile = true } else { slot.error = .ioError }
                }
                slot.complete = true
            }
        } else if res == 0 {
            if direction == .read {
                slot.endOfFile = true
            } else {
                slot.error = .ioError  // a write that moved nothing would loop forever
            }
            slot.complete = true
        } else if (res == -EINTR || res == -EAGAIN) && !stopped && end == nil {
            if res == -EAGAIN {
                // A non-blocking fd: wait for readiness, then try again.
                let events = UInt32(direction == .read ? POLLIN : POLLOUT)
                inFlight += 1
                let poll = IORequest(.poll(fd: fd, events: events), owner: slot, mayBlock: true) { [self] pollRes in
                    polled(slot, pollRes)
                }
                slot.request = poll
                requests.append(poll)
            } else {
                requests.append(makeRequestLocked(slot, fd: fd))
            }
        } else {
            slot.error = Errno(rawValue: -res)
            slot.complete = true
        }
        settleLocked(then: requests)
    }

    private func polled(_ slot: Slot, _ res: Int32) {
        var requests: [IORequest] = []
        lock.lock()
        inFlight -= 1
        slot.request = nil
        if res < 0 && res != -EINTR || stopped || end != nil {
            slot.error = res < 0 && res != -EINTR ? Errno(rawValue: -res) : .canceled
            slot.complete = true
        } else {
            requests.append(makeRequestLocked(slot, fd: entry!.fd))
        }
        settleLocked(then: requests)
    }

    /// Called with the lock held after a completion; releases it. Takes the
    /// results in order, issues what the limits allow besides `requests`,
    /// schedules the handler, and ends the I/O once nothing is in flight.
    private func settleLocked(then requests: [IORequest]) {
        let schedule = advanceLocked()
        let requests = requests + makeRequestsLocked()
        let finish = end != nil && inFlight == 0 && !ioDone
        lock.unlock()
        if schedule { runInlineDeliveries() }
        submit(requests)
        if finish { finishIO() }
    }

    /// With the lock held: takes completed slots in file order, decides how
    /// the operation ends, and enqueues the deliveries the water marks call
    /// for. Returns whether the handler runner must be scheduled.
    private func advanceLocked() -> Bool {
        while end == nil, let head = slots.first, head.complete {
            slots.removeFirst()
            // The slot's bytes that are the user's (all of them, but with
            // direct I/O at the edges of the range).
            let lower = Swift.max(head.start, ioHead)
            let upper = Swift.min(head.start + head.done, userEnd)
            if direction == .read, upper > lower {
                undelivered = undelivered.concat(head.buffer!.chunk(range: (lower - head.start)..<(upper - head.start)))
            }
            transferred += Swift.max(0, upper - lower)
            if !positional && direction == .read { issued = transferred }
            if let error = head.error {
                end = .failed(stopped && error == .canceled ? .canceled : error)
            } else if head.endOfFile {
                end = .endOfFile
            } else if head.done < head.size && direction == .read && stopped {
                end = .failed(.canceled)
            }
        }
        if end == nil {
            if transferred == length {
                end = .complete
            } else if cutAtLargestOffset && slots.isEmpty && issued >= ioLength {
                end = .endOfFile
            } else if options.endAfterFirstBytes && !positional && transferred > 0 {
                end = .complete
            } else if stopped && inFlight == 0 {
                end = .failed(.canceled)
            }
        }
        if end != nil {
            slots.removeAll()  // later slots: past the end; their results are ignored
            return false
        }
        return deliverByWaterMarksLocked(force: false)
    }

    /// With the lock held: the deliveries of the low-water rule (`force`: a
    /// strict interval tick, which delivers even less, even nothing).
    private func deliverByWaterMarksLocked(force: Bool) -> Bool {
        let low = settings.effectiveLow(positional: positional)
        let high = settings.deliverySize(positional: positional)
        var schedule = false
        switch direction {
        case .read:
            while !undelivered.isEmpty && (undelivered.count >= low || force) {
                let n = Swift.min(high, undelivered.count)
                let piece = undelivered.subrange(0..<n)
                undelivered = undelivered.subrange(n..<undelivered.count)
                schedule = enqueueLocked(Delivery(done: false, data: piece, error: nil, bytes: n)) || schedule
            }
            if force && !schedule && deliveries.isEmpty {
                schedule = enqueueLocked(Delivery(done: false, data: .empty, error: nil, bytes: 0))
            }
        case .write:
            if transferred < length && (transferred - writeDeliveredAt >= low || (force && deliveries.isEmpty)) {
                writeDeliveredAt = transferred
                schedule = enqueueLocked(Delivery(done: false, data: data.subrange(transferred..<length),
                                                  error: nil, bytes: 0))
            }
        }
        return schedule
    }

    /// The interval timer: returns false once the operation is over.
    private func tick() -> Bool {
        lock.lock()
        if ioDone || end != nil {
            lock.unlock()
            return false
        }
        let schedule = settings.strictInterval ? deliverByWaterMarksLocked(force: true) : deliverByWaterMarksLocked(force: false)
        lock.unlock()
        if schedule { runInlineDeliveries() }
        return true
    }

    /// The I/O is over: the final deliveries, the file position, the entry.
    private func finishIO(ranOnEntry: Bool = true) {
        lock.lock()
        guard !ioDone, let end else {
            lock.unlock()
            return
        }
        ioDone = true
        let pipelined = pipelineBase != nil && ranOnEntry
        var succeeded = false
        if case .complete = end { succeeded = true }
        let endPosition = fileBase + Int64(ioHead) + Int64(transferred)
        let restoreLength = succeeded ? self.restoreLength : nil
        lock.unlock()
        if let restoreLength, let entry {
            // A read-modify-write wrote a whole block past the old end of file.
            var st = stat()
            if fstat(entry.fd, &st) == 0 && Int64(st.st_size) > restoreLength {
                _ = ftruncate(entry.fd, off_t(restoreLength))
            }
        }
        guard pipelined, let entry else {
            // The position first: the last handler call may read it, or hand
            // the fd on (SEMANTICS.md, "Kinds").
            if isStream && positional && ranOnEntry && positionTaken, let entry {
                _ = lseek(entry.fd, off_t(endPosition), SEEK_SET)
            }
            deliverFinal(override: nil)
            // The last call is queued before the next operation may start, so
            // that on one serial queue the operations' handlers run in order.
            if ranOnEntry { entry?.operationFinishedIO(self) }
            return
        }
        // A pipelined stream write: the entry releases the writes of the run
        // in submission order, once each one's predecessors have ended, and
        // queues their last calls under its lock, so that a later write's
        // calls cannot be queued before an earlier one's.
        let ready = entry.pipelinedWriteEnded(self, succeeded: succeeded, endPosition: endPosition)
        for (operation, runInline) in ready where runInline { operation.runInlineDeliveries() }
        for (operation, _) in ready { entry.operationFinishedIO(operation) }
    }

    /// Queues the last handler calls and runs them if the operation is inline.
    private func deliverFinal(override: Errno?) {
        if queueFinalDeliveries(override: override) { runInlineDeliveries() }
    }

    /// Queues the last handler calls; returns whether the caller must run
    /// them (inline operations), once it holds no lock. `override`: an
    /// earlier write of the same pipelined run failed, so this one reports
    /// all its bytes as unwritten with that error, whatever landed past the
    /// failure point.
    func queueFinalDeliveries(override: Errno?) -> Bool {
        lock.lock()
        if let override {
            end = .failed(override)
            transferred = 0
        }
        let end = self.end!
        let high = settings.deliverySize(positional: positional)
        var schedule = false
        switch direction {
        case .read:
            var pieces: [DataChunk] = []
            while !undelivered.isEmpty {
                let n = Swift.min(high, undelivered.count)
                pieces.append(undelivered.subrange(0..<n))
                undelivered = undelivered.subrange(n..<undelivered.count)
            }
            switch end {
            case .complete:
                if pieces.isEmpty { pieces = [.empty] }
                for (i, piece) in pieces.enumerated() {
                    let last = i == pieces.count - 1
                    schedule = enqueueLocked(Delivery(done: last, data: piece, error: nil, bytes: piece.count)) || schedule
                }
            case .endOfFile, .failed:
                for piece in pieces {
                    schedule = enqueueLocked(Delivery(done: false, data: piece, error: nil, bytes: piece.count)) || schedule
                }
                if case .failed(let error) = end {
                    schedule = enqueueLocked(Delivery(done: true, data: nil, error: error, bytes: 0)) || schedule
                } else {
                    schedule = enqueueLocked(Delivery(done: true, data: .empty, error: nil, bytes: 0)) || schedule
                }
            }
        case .write:
            switch end {
            case .complete, .endOfFile:
                schedule = enqueueLocked(Delivery(done: true, data: nil, error: nil, bytes: 0))
            case .failed(let error):
                schedule = enqueueLocked(Delivery(done: true, data: data.subrange(transferred..<length), error: error, bytes: 0))
            }
        }
        lock.unlock()
        return schedule
    }

    // MARK: - handler calls: on `queue`, one at a time, in order

    /// With the lock held: adds a delivery; true if the runner must be scheduled.
    ///
    /// The runner goes onto the queue here, with the lock held, so that it is
    /// queued before anything this delivery lets happen (the next operation
    /// of the fd starting and queuing its own runner). Inline operations run
    /// it on the caller's thread, after the lock is released.
    private func enqueueLocked(_ delivery: Delivery) -> Bool {
        deliveries.append(delivery)
        queuedBytes += delivery.bytes
        if runnerActive { return false }
        runnerActive = true
        if options.inline { return true }
        queue.async { [self] in runDeliveries() }
        return false
    }

    /// Runs the deliveries of an inline operation (see `enqueueLocked`).
    func runInlineDeliveries() {
        runDeliveries()
    }

    /// The consumer took `bytes` of what was delivered (`manualCredit`):
    /// reading may go on.
    func release(_ bytes: Int) {
        let requests = lock.withLock { () -> [IORequest] in
            queuedBytes -= bytes
            handledBytes += bytes
            return makeRequestsLocked()
        }
        submit(requests)
    }

    /// Calls the handler for each queued delivery, one at a time, until none
    /// is left. It does not yield the queue in between: a later operation's
    /// runner, queued behind it, must not overtake this operation's calls.
    private func runDeliveries() {
        while true {
            lock.lock()
            guard let delivery = deliveries.popFirst() else {
                runnerActive = false
                lock.unlock()
                return
            }
            lock.unlock()
            handler(delivery.done, delivery.data, delivery.error)
            lock.lock()
            if !options.manualCredit {
                queuedBytes -= delivery.bytes
                handledBytes += delivery.bytes
            }
            let requests = delivery.done ? [] : makeRequestsLocked()
            lock.unlock()
            submit(requests)
            if delivery.done {
                channel?.operationEnded(self)
                // Only an operation that reached an entry is counted there.
                entry?.operationHandlersReturned()
                return
            }
        }
    }
}
