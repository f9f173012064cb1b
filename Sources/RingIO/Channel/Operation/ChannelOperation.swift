#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

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

    /// The size of an operation's requests: the high-water mark, capped by
    /// the chunk size and at least a page (4096). A write reports its
    /// progress per request, and one that fits in one request may be
    /// coalesced (`OperationProgress.isPipelinableWrite`).
    var requestSize: Int { Swift.min(IOChannel.chunkSize, Swift.max(high, 4096)) }

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
package struct OperationOptions: Sendable {
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
    /// An awaited read whose try on the caller's thread found its first
    /// page not cached: no second `preadv2(RWF_NOWAIT)` at its start.
    var skipInlineTry = false

    package init(endAfterFirstBytes: Bool = false, inline: Bool = false, manualCredit: Bool = false,
                 bufferLimit: Int = ChannelOperation.maxBufferedBytes) {
        self.endAfterFirstBytes = endAfterFirstBytes
        self.inline = inline
        self.manualCredit = manualCredit
        self.bufferLimit = bufferLimit
    }
}

/// One read or write of a channel: the shell around its `OperationProgress`.
/// It holds the one lock around the progress, turns the slots the progress
/// opens into buffers and requests, and carries out what each transition
/// returns once the lock is released: submits and cancels requests, runs
/// the handler on `queue`, sets the file position, tells the entry.
///
/// Positional operations (random channels, stream channels on regular files)
/// keep up to `maxInFlight` (4) requests of min(high-water mark,
/// `chunkSize`) bytes in flight at explicit offsets, and a read in
/// direct-I/O mode up to `OperationProgress.maxDirectInFlight` (8); a stream
/// operation reads the file position when it starts and moves it when it
/// ends. On pipes, sockets and ttys, and for writes to an `O_APPEND` fd, one
/// request is in flight at a time, at the file position.
///
/// Memory is bounded: no new read is issued while the bytes in flight plus
/// the bytes delivered but not yet handled reach `maxBufferedBytes`, so a slow
/// handler slows reading down.
///
/// Every lock is taken and released in the same function; no handler, no
/// request submission and no call into the entry happens with it held.
// @unchecked: the `let`s are immutable; `state`, `budgetTicket`,
// `budgetGranted` and the slots' `request`s are read and written only with
// `lock` held, except `entry`, `channelBase` and `lane`, written once by the
// channel before the operation is enqueued and only read afterwards, and
// `ticket`, which belongs to the entry's lock.
package final class ChannelOperation: SchedulableOperation, IORequestTarget, @unchecked Sendable {
    package typealias Direction = OperationDirection
    typealias Progress = OperationProgress<SlotIO>

    /// Whether this write may go out in a coalesced `pwritev`
    /// (`OperationProgress.isPipelinableWrite`); asked by the entry when it
    /// queues the operation.
    var isPipelinableWrite: Bool {
        guard let entry else { return false }
        return fixed {
            $0.isPipelinableWrite(Progress.StartContext(positionalFile: entry.kind.isPositional,
                                                        appendMode: entry.appendMode,
                                                        directAlignment: entry.directAlignment))
        }
    }

    /// Whether this write must run alone on its entry
    /// (`OperationProgress.needsExclusiveRun`). Asked by the entry, under
    /// its lock, before the operation starts.
    func needsExclusiveRun(_ alignment: DirectAlignment, streamPosition: Int64?) -> Bool {
        let base = channelBase
        return fixed { $0.needsExclusiveRun(alignment, streamPosition: streamPosition, channelBase: base) }
    }

    /// Asks the progress about what is fixed at its creation (its `let`s),
    /// without the lock: no transition writes them. In place: a read of
    /// `state` as a value would copy it (retaining all it holds).
    @inline(__always)
    func fixed<R>(_ body: (inout Progress) -> R) -> R { body(&state) }

    static var maxInFlight: Int { Progress.maxInFlight }
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
    /// Strong: an operation keeps its channel's state alive until its last
    /// handler call returns (the channel's active list holds the operation
    /// until then, `ChannelCore.operationEnded`, which breaks the cycle).
    /// A weak reference cost a side-table update per operation made, a
    /// weak load per operation ended and a weak destroy per operation freed.
    let channel: ChannelCore?

    // `@exclusivity(unchecked)` on these and on `state`: each is guarded
    // (see the class comment), so the runtime's dynamic exclusivity checks,
    // a thread-local lookup per access on the hot path, can find nothing.
    @exclusivity(unchecked) var entry: FDEntry?
    @exclusivity(unchecked) var channelBase: Int64 = 0
    @exclusivity(unchecked) var lane: Int = 0
    /// The entry's scheduling state of this operation: read and written only
    /// under the entry's lock (`EntryScheduler`).
    @exclusivity(unchecked) var ticket = SchedulerTicket()
    /// A handler read's hold (`ReadAheadHold`): set by `start`, before the
    /// first buffer is made, and then only read.
    @exclusivity(unchecked) var readAheadHold: ReadAheadHold?
    /// A write's bytes held for reads: set by the entry under its lock when
    /// queued, given back by the last handler call.
    @exclusivity(unchecked) var heldFrom: [(ReadAheadHold, Int)] = []

    /// The kernel side of one slot: its buffer or bytes, and its request. A
    /// value inside the progress's slot (the first slot inline): no object
    /// per slot. What the kernel may still touch once the progress let go
    /// of a slot (a read past the end still in flight) is kept alive by the
    /// request: the buffer or the iovecs are its `owner`, the operation
    /// (whose `data` holds a write's bytes) its `target`.
    struct SlotIO: ProgressPayload {
        let id: Int
        /// Reads: where the bytes land. Direct writes: the aligned copy of
        /// the bytes (and of a read-modify-write's block).
        let buffer: ReadBuffer?
        /// Writes: the bytes of this slot (of the user's range).
        let piece: DataChunk
        /// A direct write's partial block: where `piece` goes in `buffer`.
        var mergeAt = 0
        /// A write of several regions: its iovecs.
        var iovecs: IOVecs?
        /// The request in flight (to cancel on a stop).
        var request: IORequest?

        init(id: Int, buffer: ReadBuffer?, piece: DataChunk) {
            self.id = id
            self.buffer = buffer
            self.piece = piece
        }

        func chunk(range: Range<Int>) -> DataChunk { buffer!.chunk(range: range) }
    }

    /// The iovecs of a write of several regions, freed with the last
    /// reference (the slot's, or its request's while in flight).
    final class IOVecs: Sendable {
        // Sendable: the pointer is written once, before the request that
        // reads it is submitted, and never again.
        nonisolated(unsafe) let pointer: UnsafeMutablePointer<iovec>

        init(count: Int) { pointer = .allocate(capacity: count) }

        deinit { pointer.deallocate() }
    }

    /// A slot's request tag: its id, and whether the request is a poll.
    @inline(__always) static func tag(_ id: Int, poll: Bool) -> Int { id << 1 | (poll ? 1 : 0) }

    /// The progress's questions, answered from the fd and the engine. Used
    /// only with `lock` held.
    struct Host: OperationProgressHost {
        // unowned(unsafe): a host lives only inside a call on `operation`
        // (made by its `host`), so the operation outlives it; no retain
        // and release per transition.
        unowned(unsafe) let operation: ChannelOperation
        let fd: Int32
        func filePosition() -> Result<Int64, Errno> {
            Result { () throws(Errno) in try Syscall.lseek(fd, 0, SEEK_CUR) }
        }
        func fileLength() -> Int64? {
            (try? Syscall.fstat(fd))?.size
        }
        func makeSlot(_ slot: NewSlot) -> SlotIO? { operation.makeSlotLocked(slot) }
        func heldInWrites() -> Int { operation.readAheadHold?.bytes ?? 0 }
    }

    var host: Host { Host(operation: self, fd: entry?.fd ?? -1) }

    /// The lock around `state`: a bare pthread mutex inside this object.
    let lock = OperationLock()
    @exclusivity(unchecked) var state: Progress
    /// Waiting for read-buffer bytes (see ChannelOperation+Budget.swift).
    @exclusivity(unchecked) var budgetTicket: ReadBudget.Ticket?
    @exclusivity(unchecked) var budgetGranted = 0
    /// The channel's list of active operations (`ChannelCore.activeHead`), read
    /// and written only with the channel's lock held: whether this operation
    /// is on it, and its neighbours there. `next` holds the next one;
    /// `previous` is unowned(unsafe), the previous one holding this one.
    @exclusivity(unchecked) var isActive = false
    @exclusivity(unchecked) var activeNext: ChannelOperation?
    @exclusivity(unchecked) unowned(unsafe) var activePrevious: ChannelOperation?

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
        self.state = Progress(direction: direction, isStream: isStream, settings: settings, options: options,
                              offset: offset, length: length, data: data)
    }

    // MARK: - life cycle

    /// Queues the operation on `entry` (the channel's lock is held).
    func enqueue(on entry: FDEntry, base: Int64) -> FDEntry.Ready {
        self.entry = entry
        self.channelBase = base
        self.lane = entry.lane(isRead: direction == .read)
        return entry.enqueue(self)
    }

    /// Ends an operation that never reached an entry (closed or failed
    /// channel, empty range): its one and only handler call.
    func finishWithoutIO(_ error: Errno?) {
        lock.lock()
        let runner = state.finishWithoutIO(error)
        lock.unlock()
        run(runner)
    }

    /// The entry says it is this operation's turn. `inlineFirst`: it is so
    /// inside the call that submitted it, with nothing ahead of it on the
    /// fd: a read may try its one request on this thread first
    /// (`tryInline`, ChannelOperation+Inline.swift).
    func start(inlineFirst: Bool = false) {
        guard let entry else { return }
        let context = Progress.StartContext(positionalFile: entry.kind.isPositional, appendMode: entry.appendMode,
                                            writeOnly: entry.writeOnly, directAlignment: entry.directAlignment,
                                            channelBase: channelBase)
        if needsReadAheadHold { readAheadHold = ReadAheadHold(reader: self) }
        lock.lock()
        let actions = state.start(context, host: host)
        let requests = requestsLocked(actions)
        lock.unlock()
        if let interval = actions.interval {
            IntervalTicks.schedule(on: engine.timers, every: interval) { [weak self] in self?.tick() ?? false }
        }
        if inlineFirst, direction == .read, !options.skipInlineTry, let request = requests.one, let res = tryInline(request) {
            // Done here: the completion as the engine would have given it
            // (a short read asks for the rest, which goes to the engine).
            run(actions.runner)
            request.complete(res)
            if actions.finish { finishIO() }
            return
        }
        carryOut(actions, requests)
    }

    /// `close(stop: true)`: cancels what is in flight; a queued operation
    /// ends at once with `.canceled`.
    func stop() {
        var inFlight: [IORequest] = []
        lock.lock()
        let action = state.stop()
        withdrawFromBudgetLocked()
        if action == .cancelInFlight {
            for i in 0..<state.slots.count {
                if let request = state.slots[offset: i].payload.request { inFlight.append(request) }
            }
        }
        lock.unlock()
        switch action {
        case .none:
            break
        case .finish:
            finishIO()
        case .withdraw:
            if let entry, entry.removeIfPending(self) {
                lock.lock()
                state.canceledBeforeStart()
                lock.unlock()
                finishIO(ranOnEntry: false)
            }
        case .cancelInFlight:
            for request in inFlight { engine.cancel(request) }
        }
    }

    /// Bytes requested from the file but not yet handled by the handler
    /// (for tests of the read-ahead bound).
    var readAheadBytes: Int { lock.withLock { state.readAheadBytes } }

    // MARK: - requests

    var mayBlock: Bool { entry?.kind.mayBlock ?? false }

    /// With the lock held: the requests of `actions` (`again`, then the
    /// slots opened).
    func requestsLocked(_ actions: Progress.Actions) -> Requests {
        var requests = Requests()
        if let again = actions.again { requests.append(requestLocked(again)) }
        for id in actions.fresh { requests.append(requestLocked(for: id)) }
        return requests
    }

    /// With the lock held: the requests for the slots `fresh` opened.
    func requestsLocked(_ fresh: Range<Int>) -> Requests {
        var requests = Requests()
        for id in fresh { requests.append(requestLocked(for: id)) }
        return requests
    }

    /// With the lock held: the request `again` asks for.
    func requestLocked(_ again: Progress.Again) -> IORequest {
        switch again {
        case .rest(let id):
            return requestLocked(for: id)
        case .poll(let id, let forReading):
            let events = UInt32(forReading ? POLLIN : POLLOUT)
            let poll = IORequest(.poll(fd: entry!.fd, events: events), target: self, tag: Self.tag(id, poll: true),
                                 owner: nil, mayBlock: true)
            state.updatePayload(of: id) { $0.request = poll }
            return poll
        case .readModifyWrite(let id, let read):
            merge(state.slot(id)!.payload, read: read)
            return requestLocked(for: id)
        }
    }

    /// With the lock held: the request for what is left of slot `id`.
    @inline(__always)
    func requestLocked(for id: Int) -> IORequest {
        // The progress in place: a read of `state` as a value to ask it a
        // question copies it (retaining all it holds).
        requestLocked(for: id, &state)
    }

    private func requestLocked(for id: Int, _ state: inout Progress) -> IORequest {
        let i = state.index(of: id)!
        let slot = state.slots[offset: i]
        var io = slot.payload
        let fd = entry!.fd
        var owner: AnyObject? = io.buffer
        let (offset, range) = state.requestRange(of: slot)
        let operation: IORequest.Operation
        var fixedBuffer: RegisteredBuffer?
        if direction == .read || slot.prefill {
            let buffer = io.buffer!
            operation = .read(fd: fd, buffer: UnsafeMutableRawBufferPointer(start: buffer.pointer + range.lowerBound,
                                                                             count: range.count),
                              offset: offset)
            fixedBuffer = buffer.registered
        } else if let buffer = io.buffer {
            // Direct I/O: the aligned copy.
            operation = .write(fd: fd, buffer: UnsafeRawBufferPointer(start: buffer.pointer + range.lowerBound,
                                                                      count: range.count),
                               offset: offset)
            fixedBuffer = buffer.registered
        } else {
            let rest = range.lowerBound == 0 ? io.piece : io.piece.subrange(range)
            if rest.regionCount == 1 {
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
                let iovecs = IOVecs(count: count)
                var i = 0
                rest.apply { _, _, bytes in
                    iovecs.pointer[i] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                                              iov_len: bytes.count)
                    i += 1
                    return i < count
                }
                io.iovecs = iovecs
                owner = iovecs
                operation = .writev(fd: fd, iovecs: iovecs.pointer, count: count, offset: offset)
            }
        }
        let request = IORequest(operation, target: self, tag: Self.tag(id, poll: false), owner: owner,
                                mayBlock: mayBlock, fixedBuffer: fixedBuffer, fixedFile: entry?.fixedFile)
        request.ioPriority = Self.ioPriority(for: queue)
        io.request = request
        state.slots.modify(offset: i) { $0.payload = io }
        return request
    }

    /// The I/O priority of the reads and writes whose handlers run on
    /// `queue`: the idle class for a `.background` queue, where the kernel
    /// takes it (io_uring reads and writes), otherwise the default.
    static func ioPriority(for queue: IOQueue) -> UInt16 {
        queue.priority == .background ? IORequest.idleIOPriority : 0
    }

    /// A pthread mutex inside the operation's own object: no allocation of
    /// its own (a `PlainLock` is two, a mutex block one). `_Cell` is the
    /// Synchronization module's raw-layout cell: its storage stays where the
    /// operation put it, so its address is stable for the pthread calls.
    /// (A pthread mutex, not `Synchronization.Mutex`: see `Locked`.)
    struct OperationLock: ~Copyable {
        let cell: _Cell<pthread_mutex_t>

        init() {
            cell = _Cell(pthread_mutex_t())
            pthread_mutex_init(cell._address, nil)
        }

        deinit { pthread_mutex_destroy(cell._address) }

        @inline(__always) func lock() { pthread_mutex_lock(cell._address) }
        @inline(__always) func unlock() { pthread_mutex_unlock(cell._address) }

        @inline(__always) func withLock<R>(_ body: () throws -> R) rethrows -> R {
            pthread_mutex_lock(cell._address)
            defer { pthread_mutex_unlock(cell._address) }
            return try body()
        }
    }

    /// Requests to submit together; one needs no array.
    struct Requests {
        var one: IORequest?
        var more: [IORequest] = []

        mutating func append(_ request: IORequest) {
            if let one {
                more = [one, request]
                self.one = nil
            } else if more.isEmpty {
                one = request
            } else {
                more.append(request)
            }
        }

        var isEmpty: Bool { one == nil && more.isEmpty }
    }

    func submit(_ requests: Requests) {
        if let one = requests.one {
            engine.submit(one)
        } else if !requests.more.isEmpty {
            engine.submit(contentsOf: requests.more)
        } else {
            return
        }
        // A stop that came between making and submitting them found them
        // not yet in the engine: cancel them again now that they are.
        if lock.withLock({ state.stopped }) {
            if let one = requests.one { engine.cancel(one) }
            for r in requests.more { engine.cancel(r) }
        }
    }
}
