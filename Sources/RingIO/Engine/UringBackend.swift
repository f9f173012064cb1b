#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import Synchronization
import RingIOBase
import RingIOQueue

/// The io_uring backend: one ring, owned by one thread.
///
/// ```
///  any thread                 ring thread
///  ──────────                 ───────────
///  submit(r) ──▶ inbox ──swap──▶ backlog ──▶ SQEs ──io_uring_enter──▶ kernel
///       │       (locked)                              │
///       └─ eventfd write, only if the ring            ▼
///          thread sleeps in io_uring_enter    CQEs ──▶ r.complete(res)
/// ```
///
/// - The ring is created with `SINGLE_ISSUER | DEFER_TASKRUN` where the kernel
///   has them (completions are then posted only when the ring thread enters
///   the kernel, with no task-work interrupts), else `COOP_TASKRUN`, else none.
/// - The ring thread is the only one that touches the ring. It batches every
///   request that arrived since its last turn into SQEs and submits them with
///   one `io_uring_enter`, which also reaps and, when there is nothing else to
///   do, waits for the next CQE.
/// - A read of an eventfd is always pending in the ring; a submitter writes
///   the eventfd only when the ring thread has said it is going to sleep.
/// - At most `completionEntries` SQEs are outstanding, so the CQ ring cannot
///   overflow; the rest wait in `backlog`, in order, and are never dropped.
///   (If the kernel still reports an overflow, liburing's reap flushes it.)
/// - Each submitted request is retained in its `user_data` until its CQE.
final class UringBackend: EngineBackend, @unchecked Sendable {
    // @unchecked: the fields under "ring thread only" are touched only by the
    // ring thread; those under "shared" only with `lock` held; the rest are
    // immutable after `start`.

    static let wakeUserData: UInt64 = 1

    // Immutable after start.
    let submissionEntries: Int
    let completionEntries: Int
    let setupDescription: String
    private let ring: UnsafeMutablePointer<io_uring>
    private let eventFD: Int32
    private let eventBuffer: UnsafeMutablePointer<UInt64>
    /// Registered buffers and files (ring thread only, except its counters).
    let tables: RingTables
    /// The kernel runs chains on direct descriptors (`ChainedFile`) and the
    /// ring has a file table for them.
    let supportsChainedFiles: Bool
    /// The kernel keeps a poll armed after each readiness
    /// (`IORING_POLL_ADD_MULTI`, Linux 5.13); before that a
    /// `.pollMultishot` request is a one-shot poll that the caller re-arms.
    let multishotPolls: Bool
    /// The clock of `.timeout` deadlines: `CLOCK_BOOTTIME` (the clock of
    /// `ContinuousClock` on Linux) where the kernel has
    /// `IORING_TIMEOUT_BOOTTIME` (5.15), else `CLOCK_MONOTONIC`.
    let timeoutClock: clockid_t
    /// The ring has `IORING_SETUP_TASKRUN_FLAG`: completions the kernel
    /// holds for the next `io_uring_enter` show in the SQ ring's flags.
    let taskrunFlag: Bool
    /// The thread id of the ring thread (for signals forwarded to it).
    let threadID = PublishedThreadID()

    // Ring thread only. `@exclusivity(unchecked)` here and below: each of
    // these is touched by one thread or under `lock`, so the runtime's
    // dynamic exclusivity checks (a thread-local access set per access,
    // 6.5% of the ring thread's time in a 4 KiB random-read profile) can
    // find nothing; the static checks still apply.
    @exclusivity(unchecked) var backlog = TicketQueue<IORequest>()
    @exclusivity(unchecked) private var cancels = RingBuffer<IORequest>(initialCapacity: 16)
    @exclusivity(unchecked) private var outstanding = 0
    @exclusivity(unchecked) private var wakeArmed = false
    @exclusivity(unchecked) private var local: [IORequest] = []
    /// Requests submitted by the ring thread itself (handlers of the ring
    /// queue, inline completions): no lock, no eventfd. See UringBackend+RingQueue.swift.
    @exclusivity(unchecked) var ringInbox: [IORequest] = []
    @exclusivity(unchecked) var ringAccepting: [IORequest] = []
    /// Ring queues whose drain the ring thread runs next.
    @exclusivity(unchecked) var ringDrains: [IOQueue] = []
    @exclusivity(unchecked) var ringDrainsRunning: [IOQueue] = []
    /// The ring thread has seen `stopping` (ring thread only).
    @exclusivity(unchecked) var ringStopping = false
    /// The last wait for a completion was shorter than the idle poll: poll
    /// before the next one (ring thread only; see `run`, step 4).
    @exclusivity(unchecked) private var pollsBeforeWaiting = false

    /// How long an idle ring thread polls for new work before it sleeps
    /// (paused while the machine is busy: see `IdleSpin`).
    let spin: IdleSpin
    var spinNanoseconds: UInt64 { spin.budget }
    /// Set by submitters when the inbox gains work; polled while spinning.
    let hasWork = Atomic<Bool>(false)

    // Shared, under `lock`.
    let lock = ConditionLock()
    @exclusivity(unchecked) private var inbox: [IORequest] = []
    /// Ring queues scheduled from other threads (under `lock`).
    @exclusivity(unchecked) var drainInbox: [IOQueue] = []
    @exclusivity(unchecked) private var localDrains: [IOQueue] = []
    /// The ring thread waits in `io_uring_enter`: wake it with the eventfd.
    @exclusivity(unchecked) private var sleeping = false
    /// The ring thread has nothing in the kernel and waits on `lock`'s
    /// condition: a futex wake-up, several times cheaper than the eventfd path.
    @exclusivity(unchecked) private var idleSleeping = false
    @exclusivity(unchecked) private var wakePending = false
    @exclusivity(unchecked) var stopping = false
    @exclusivity(unchecked) var stopped = false

    /// The hand-offs of one reap to the queues (ring thread only, but its counters).
    let delivery = DeliveryBatch()

    /// `io_uring_enter` calls so far, for tests and benchmarks.
    private let enterCounter = Atomic<UInt64>(0)
    var enterCalls: UInt64 { enterCounter.load(ordering: .relaxed) }

    /// See `start` (UringBackend+Setup.swift).
    init(ring: UnsafeMutablePointer<io_uring>, eventFD: Int32, description: String, spinNanoseconds: UInt64,
                 tables: RingTables, oldKernel: Bool, taskrunFlag: Bool) {
        self.taskrunFlag = taskrunFlag
        self.spin = IdleSpin(budget: spinNanoseconds)
        self.tables = tables
        self.ring = ring
        self.eventFD = eventFD
        self.eventBuffer = .allocate(capacity: 1)
        self.submissionEntries = Int(ring.pointee.sq.ring_entries)
        self.completionEntries = Int(ring.pointee.cq.ring_entries)
        self.setupDescription = description
        self.supportsChainedFiles = tables.fileCapacity > 0 && cliburing_supports_direct_chain(ring) != 0
        let kernel = oldKernel ? KernelVersion(5, 10) : KernelVersion.running
        self.multishotPolls = kernel >= KernelVersion(5, 13)
        self.timeoutClock = kernel >= KernelVersion(5, 15) ? CLOCK_BOOTTIME : CLOCK_MONOTONIC
        inbox.reserveCapacity(256)
        local.reserveCapacity(256)
    }

    deinit {
        eventBuffer.deallocate()
        ring.deallocate()
    }

    // MARK: - submission (any thread)

    func submit(_ request: IORequest) {
        if isRingThread {
            submitFromRing(request)
            return
        }
        lock.lock()
        if stopped {
            lock.unlock()
            request.complete(-ECANCELED)
            return
        }
        inbox.append(request)
        hasWork.store(true, ordering: .releasing)
        let wake = wakeLocked()
        lock.unlock()
        if wake { signalEventFD() }
    }

    func submit(contentsOf requests: [IORequest]) {
        if isRingThread {
            for r in requests { submitFromRing(r) }
            return
        }
        lock.lock()
        if stopped {
            lock.unlock()
            for r in requests { r.complete(-ECANCELED) }
            return
        }
        inbox.append(contentsOf: requests)
        hasWork.store(true, ordering: .releasing)
        let wake = wakeLocked()
        lock.unlock()
        if wake { signalEventFD() }
    }

    /// With `lock` held: wakes an idle ring thread (condition variable) or
    /// says that one sleeping in `io_uring_enter` needs the eventfd written.
    @inline(__always)
    func wakeLocked() -> Bool {
        if idleSleeping {
            idleSleeping = false
            lock.signal()
            return false
        }
        if sleeping && !wakePending {
            wakePending = true
            return true
        }
        return false
    }

    func signalEventFD() {
        _ = try? Syscall.eventfdWrite(eventFD)
    }

    func shutdown() {
        let wake = lock.withLock { () -> Bool in
            stopping = true
            if idleSleeping {
                idleSleeping = false
                lock.signal()
            }
            return sleeping
        }
        if wake { signalEventFD() }
    }

    // MARK: - the ring thread

    /// The ring thread's loop, from `start` until the engine shuts down.
    func run() {
        var cqes = [UnsafeMutablePointer<io_uring_cqe>?](repeating: nil, count: 256)
        var results: [(UInt64, Int32, UInt32)] = []
        results.reserveCapacity(256)
        var cancelledEverything = false
        markRingThread()
        threadID.publish(cliburing_gettid())

        while true {
            // 1. Take what arrived.
            lock.lock()
            swap(&inbox, &local)
            swap(&drainInbox, &localDrains)
            hasWork.store(false, ordering: .relaxed)
            let stop = stopping
            lock.unlock()
            ringStopping = stop
            ringDrains.append(contentsOf: localDrains)
            localDrains.removeAll(keepingCapacity: true)
            // The ring queue's items (handlers whose completions were reaped
            // last turn, work enqueued on it), then what they submitted.
            runRingDrains()
            for request in local { accept(request, stopping: stop) }
            local.removeAll(keepingCapacity: true)
            acceptRingInbox(stopping: stop)

            if stop {
                if !cancelledEverything {
                    cancelledEverything = true
                    while let r = backlog.popFirst() {
                        r.engineState = .done
                        r.complete(-ECANCELED)
                    }
                    cancelAllInFlight()
                }
                if outstanding == 0 && ringDrains.isEmpty { break }
            } else if !wakeArmed {
                armWake()
            }

            // 2. Fill the SQ ring.
            fill()

            // 3. Idle (nothing in the kernel but the eventfd read): sleep on the
            //    condition variable, the cheapest wake-up for the next submitter.
            if !stop && outstanding <= (wakeArmed ? 1 : 0) && backlog.isEmpty && cancels.isEmpty
                && ringDrains.isEmpty && ringInbox.isEmpty && cliburing_cq_ready(ring) == 0 {
                if io_uring_sq_ready(ring) > 0 {
                    enterCounter.add(1, ordering: .relaxed)
                    _ = io_uring_submit(ring)
                }
                // Spin a little first: a thread wake-up costs tens of µs on a VM
                // (unless the machine is busy: see `IdleSpin`).
                _ = spin.poll { hasWork.load(ordering: .acquiring) }
                lock.lock()
                while inbox.isEmpty && drainInbox.isEmpty && !stopping {
                    idleSleeping = true
                    lock.wait()
                }
                idleSleeping = false
                lock.unlock()
                continue
            }

            // 4. Submit; reap; wait for a completion if there is nothing else to do.
            //    When completions have been coming faster than a wake-up
            //    (the last wait was shorter than the idle poll: readiness
            //    ping-pong, a timer's early wake), poll the SQ ring's
            //    TASKRUN flag for the next one first, as an idle ring thread
            //    polls for requests: it then costs no wake-up.
            var waiting = false
            var polled = false
            if cliburing_cq_ready(ring) == 0 && outstanding > 0 && ringDrains.isEmpty && ringInbox.isEmpty
                && !(pollsBeforeWaiting && { polled = pollForCompletion(); return polled }()) {
                lock.lock()
                if (inbox.isEmpty && drainInbox.isEmpty) || stop {
                    sleeping = true
                    waiting = true
                }
                lock.unlock()
            }
            enterCounter.add(1, ordering: .relaxed)
            let waitStart = waiting && taskrunFlag ? monotonicNanoseconds() : 0
            let rc = waiting ? io_uring_submit_and_wait(ring, 1) : io_uring_submit_and_get_events(ring)
            if waiting {
                if taskrunFlag { pollsBeforeWaiting = monotonicNanoseconds() &- waitStart < spin.budget }
                lock.lock()
                sleeping = false
                wakePending = false
                lock.unlock()
            }
            if polled && cliburing_cq_ready(ring) == 0 && !hasWork.load(ordering: .relaxed) {
                // The flag was set but the enter posted nothing: stop
                // polling until a short wait says otherwise.
                pollsBeforeWaiting = false
            }
            if rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME {
                fatalError("RingIO: io_uring_enter failed unexpectedly: \(Errno(rawValue: -rc))")
            }

            // 5. Reap everything that is ready. What the completions hand to
            //    queues goes over after the reap, one step per queue and one
            //    pool submission in all (IOQueue+Batch.swift).
            delivery.collect { reapReady(&cqes, &results) }
        }

        io_uring_queue_exit(ring)
        Syscall.closeIgnoringErrors(eventFD)
        let (leftovers, drains) = lock.withLock { () -> ([IORequest], [IOQueue]) in
            stopped = true
            defer { inbox = []; drainInbox = [] }
            return (inbox, drainInbox)
        }
        unmarkRingThread()
        for r in leftovers + ringInbox { r.complete(-ECANCELED) }
        ringInbox = []
        // The ring thread is gone: the pool runs what is left of the ring queues.
        for q in drains + ringDrains { WorkerPool.shared.submit(.drain(q)) }
        ringDrains = []
    }

    /// Ring thread, about to wait for a completion with nothing to submit:
    /// polls (within `spin`'s budget) for a completion or new work; whether
    /// one came (then the turn goes on without waiting). With SQEs to
    /// submit it does not poll (that would take a second `io_uring_enter`).
    private func pollForCompletion() -> Bool {
        guard taskrunFlag, io_uring_sq_ready(ring) == 0, spin.allowed else { return false }
        let ready = spin.poll {
            cliburing_sq_taskrun(ring) != 0 || cliburing_cq_ready(ring) > 0 || hasWork.load(ordering: .acquiring)
        }
        if !ready { pollsBeforeWaiting = false }
        return ready
    }

    /// Ring thread: runs the completions of every CQE that is ready.
    private func reapReady(_ cqes: inout [UnsafeMutablePointer<io_uring_cqe>?],
                           _ results: inout [(UInt64, Int32, UInt32)]) {
        while true {
            let n = cqes.withUnsafeMutableBufferPointer { buffer in
                Int(io_uring_peek_batch_cqe(ring, buffer.baseAddress, UInt32(buffer.count)))
            }
            if n == 0 { break }
            for i in 0..<n {
                let cqe = cqes[i]!.pointee
                results.append((cqe.user_data, cqe.res, cqe.flags))
            }
            io_uring_cq_advance(ring, UInt32(n))
            for (userData, res, flags) in results { complete(userData: userData, res: res, flags: flags) }
            results.removeAll(keepingCapacity: true)
            if n < cqes.count { break }
        }
    }

    /// Ring thread: sorts a new request into the backlog, or handles a cancel.
    func accept(_ request: IORequest, stopping: Bool) {
        if stopping {
            request.engineState = .done
            request.complete(-ECANCELED)
            return
        }
        if let task = request.ringTask {
            request.engineState = .done
            request.complete(task(self))
            return
        }
        guard case .cancel(let target) = request.operation else {
            request.engineState = .queued
            request.backlogTicket = backlog.append(request)
            return
        }
        switch target.engineState {
        case .queued:
            // Not yet in the kernel: complete it here (with its whole chain).
            // O(1) per request (a chain's requests hold consecutive tickets).
            for r in backlog.removeQueued(target) {
                r.engineState = .done
                r.complete(-ECANCELED)
            }
            request.engineState = .done
            request.complete(0)
        case .inFlight:
            request.engineState = .queued
            cancels.append(request)
        case .new, .done:
            // Already finished (or never submitted): nothing to cancel.
            request.engineState = .done
            request.complete(-ENOENT)
        }
    }

    private func armWake() {
        guard let sqe = io_uring_get_sqe(ring) else { return }
        io_uring_prep_read(sqe, eventFD, eventBuffer, 8, 0)
        cliburing_sqe_set_data64(sqe, Self.wakeUserData)
        wakeArmed = true
        outstanding += 1
    }

    private func cancelAllInFlight() {
        // Cancel every request in the kernel, the eventfd read included.
        guard outstanding > 0, let sqe = io_uring_get_sqe(ring) else { return }
        io_uring_prep_cancel64(sqe, 0, Int32(cliburing_async_cancel_any()))
        cliburing_sqe_set_data64(sqe, 0)
        outstanding += 1
    }

    /// Moves cancels, then backlog requests, into SQEs while the CQ has room.
    private func fill() {
        while outstanding < completionEntries, let cancel = cancels.first {
            guard case .cancel(let target) = cancel.operation else { fatalError("unreachable") }
            if target.engineState != .inFlight {
                _ = cancels.popFirst()
                cancel.engineState = .done
                cancel.complete(-ENOENT)
                continue
            }
            guard let sqe = io_uring_get_sqe(ring) else { return }
            _ = cancels.popFirst()
            io_uring_prep_cancel64(sqe, UInt64(UInt(bitPattern: Unmanaged.passUnretained(target).toOpaque())), 0)
            cliburing_sqe_set_data64(sqe, UInt64(UInt(bitPattern: Unmanaged.passRetained(cancel).toOpaque())))
            cancel.engineState = .inFlight
            outstanding += 1
        }
        while outstanding < completionEntries, let request = backlog.first {
            // A request, or a whole linked chain, goes into the SQ when it fits; else it waits.
            let length = request.chainLength
            if outstanding + length > completionEntries || Int(io_uring_sq_space_left(ring)) < length {
                return
            }
            if case .openChained(_, _, _, _, let file) = request.operation, !reserveSlot(for: file) { continue }
            for _ in 0..<length {
                guard let request = backlog.popFirst(), let sqe = io_uring_get_sqe(ring) else {
                    fatalError("unreachable: a chain's requests are queued together and the SQ has room")
                }
                prepare(sqe, request)
                if request.linkNext {
                    cliburing_sqe_add_flags(sqe, request.hardLinkNext ? cliburing_iosqe_io_hardlink()
                                                                        : cliburing_iosqe_io_link())
                }
                cliburing_sqe_set_data64(sqe, UInt64(UInt(bitPattern: Unmanaged.passRetained(request).toOpaque())))
                request.engineState = .inFlight
                outstanding += 1
            }
        }
    }

    private func complete(userData: UInt64, res: Int32, flags: UInt32) {
        if flags & UInt32(IORING_CQE_F_MORE) != 0, userData > Self.wakeUserData {
            // A multishot poll's readiness: the request stays in flight (and
            // retained in its user_data) until a CQE without the flag.
            let request = Unmanaged<IORequest>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(userData))!)
                .takeUnretainedValue()
            request.shot?(res)
            return
        }
        outstanding -= 1
        if userData == Self.wakeUserData {
            wakeArmed = false
            return
        }
        if userData == 0 { return }  // the shutdown cancel-all
        let request = Unmanaged<IORequest>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(userData))!).takeRetainedValue()
        if res == -ENXIO, !request.forceAsync, request.chainHead == nil,
           case .openat(_, _, let flags, _) = request.operation, flags & O_NONBLOCK == 0 {
            // io_uring tries an open without blocking first, and a FIFO with no
            // reader then gives ENXIO where a blocking open waits for one:
            // open it again on the ring's workers, which block (and can be cancelled).
            request.forceAsync = true
            request.engineState = .queued
            request.backlogTicket = backlog.append(request)
            return
        }
        if case .closeChained(let file) = request.operation, file.slot >= 0 {
            tables.releaseChainSlot(file.slot)
            file.slot = -1
        }
        request.engineState = .done
        request.complete(res)
    }
}
