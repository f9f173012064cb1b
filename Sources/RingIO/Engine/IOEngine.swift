#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOQueue

/// The engine that performs RingIO's system calls: an io_uring ring owned by
/// one thread, or, where io_uring cannot be used, a pool of threads making
/// blocking calls with the same semantics.
///
/// Channels take an engine (`IOEngine.shared` unless told otherwise). Most
/// programs need only the shared one; a separate engine gives a subsystem its
/// own ring and ring thread.
///
/// The engine is released, and its ring closed, when the last channel using it
/// and the last reference to it are gone; requests still in flight then end
/// with `ECANCELED`.
public final class IOEngine: Sendable {
    /// The mechanism an engine uses.
    public enum Backend: Sendable, Hashable, CustomStringConvertible {
        /// An io_uring ring.
        case ioUring
        /// Blocking system calls on worker threads.
        case threadPool

        public var description: String {
            switch self {
            case .ioUring: return "io_uring"
            case .threadPool: return "thread pool"
            }
        }
    }

    /// How to build an engine.
    public struct Configuration: Sendable {
        /// Submission-queue entries of the ring (rounded up to a power of two
        /// by the kernel); the completion queue gets twice as many. Requests
        /// beyond what the ring holds wait in the engine.
        public var ringEntries: Int
        /// The backend to use. `nil`: io_uring, falling back to the thread
        /// pool (with `fallbackReason`) when io_uring cannot be set up, or when
        /// the environment variable `RINGIO_BACKEND` is `threadpool`.
        public var backend: Backend?

        /// How long an idle ring thread polls for new requests before it
        /// sleeps. Waking a sleeping thread costs 5–50 µs (more on virtual
        /// machines); a short poll makes a request that follows closely on the
        /// previous one start at once. `.zero` never polls. A poll that
        /// finds it lost its CPU (a busy machine) stops, and polling pauses
        /// for 100 ms: sleepers are woken instead.
        ///
        /// The same poll serves two more waits on io_uring: after a wait
        /// for a completion that was shorter than it, the ring thread polls
        /// for the next completion before it sleeps; and it wakes a little
        /// before a timer's deadline and polls the clock up to it (see
        /// `IOTimerSource`). `.zero` turns these off too.
        public var idleSpin: Duration

        /// Register the shared read-buffer pool's buffers with the ring and
        /// read into them with `READ_FIXED` (write from them with
        /// `WRITE_FIXED`). Each buffer is registered on its first use;
        /// registered pages stay pinned while the ring lives. io_uring only.
        ///
        /// Off by default: the pool serves reads of 128 KiB – 1 MiB, and on
        /// the kernel measured (6.18) a `READ_FIXED` of 1 MiB from the page
        /// cache was about 30% slower than a plain `READ` (in C, without
        /// RingIO); direct reads of that size are bound by the device either
        /// way.
        public var registersBuffers: Bool

        /// Slots of the ring's registered-file table. The fd of a channel
        /// that issues many requests takes a slot while its channels are
        /// open; when the table is full, fds go unregistered (same results,
        /// a little more work per request). 0: no registered files.
        /// io_uring only.
        public var registeredFileSlots: Int

        /// A configuration with `ringEntries` submission-queue entries (the
        /// completion queue gets twice as many) and the other settings at
        /// their defaults.
        ///
        /// - Parameters:
        ///   - ringEntries: the size of the io_uring submission queue; more
        ///     requests than this wait in the engine, in order.
        ///   - backend: `nil` (the default) tries io_uring and falls back to
        ///     the thread pool if it cannot be set up; `.ioUring` throws the
        ///     setup error instead; `.threadPool` never tries io_uring.
        public init(ringEntries: Int = 256, backend: Backend? = nil) {
            self.ringEntries = ringEntries
            self.backend = backend
            self.idleSpin = .microseconds(50)
            self.registersBuffers = false
            self.registeredFileSlots = 64
        }

        /// The most bytes of read buffers the engine's channels hold for
        /// reads not yet delivered (`ReadBudget`); internal, for tests.
        var readBufferLimit = ReadBudget.defaultLimit

        /// Tests: the io_uring backend acts as on a kernel before 5.13 (a
        /// one-shot poll that its caller re-arms for `.pollMultishot`,
        /// `CLOCK_MONOTONIC` timeouts), so the fallbacks run here too.
        package var actsAsOldKernel = false
    }

    /// The backend in use.
    public let backend: Backend
    /// Why io_uring is not in use; `nil` when it is.
    public let fallbackReason: String?

    let core: any EngineBackend
    let uring: UringBackend?

    /// The engine's own serial queue: on io_uring, its items run on the ring
    /// thread, between reaps.
    ///
    /// A handler delivered on it runs right after its completion is reaped,
    /// with no thread wake-up, and what it submits enters the kernel with the
    /// ring thread's next `io_uring_enter`, with no eventfd write. A task
    /// whose executor preference is this queue (`Task(executorPreference:
    /// engine.queue)`), or an actor whose executor it is, resumes from an
    /// awaited read or write on the ring thread too.
    ///
    /// Keep its items short and never block in them (no `sync` onto a busy
    /// queue, no semaphore, no blocking system call): while one runs, no
    /// completion of the engine is reaped. Items run on the ring thread
    /// except while a `sync` caller owns the queue (its block, and the items
    /// ahead of it, run on the caller's thread, as with any serial queue),
    /// and after the engine has shut down (the worker pool runs them).
    ///
    /// On the thread-pool backend it is an ordinary serial queue on the
    /// worker pool.
    public let queue: IOQueue
    /// The cap on read buffers held by reads in flight (`ReadBudget`).
    package let readBudget: ReadBudget
    /// The engine's timers (timer sources, channel intervals, and, for the
    /// shared engine, `asyncAfter`): a heap and one alarm of the worker pool.
    package let timers: EngineTimerService
    #if DEBUG
    /// Debug builds: faults tests inject into this engine's requests.
    package let faults = FaultInjector()
    #endif

    private static let _shared: IOEngine = {
        let engine = (try? IOEngine(configuration: Configuration()))
            ?? IOEngine(threadPoolBecause: "io_uring could not be set up")
        // The shared engine keeps the library's timers (asyncAfter, channel
        // intervals): no timer thread. Only the shared engine's: it lives
        // as long as the process, where another engine's service would
        // stop firing when that engine is released.
        TimerServices.install(engine.timers)
        if let reason = engine.fallbackReason, getenv("RINGIO_QUIET") == nil {
            let line = "RingIO: using the thread-pool backend: \(reason)\n"
            _ = Array(line.utf8).withUnsafeBytes { try? Syscall.write(2, from: $0) }
        }
        return engine
    }()

    /// The engine channels use by default, created on first use.
    ///
    /// It uses io_uring where it can; otherwise it uses the thread pool and
    /// says why, once, on stderr (set `RINGIO_QUIET=1` to silence that line)
    /// and in `fallbackReason`.
    public static var shared: IOEngine { _shared }

    /// Creates an engine.
    ///
    /// - Throws: when `configuration.backend` is `.ioUring` and the ring
    ///   cannot be set up: the error of `io_uring_setup` (`ENOSYS` where the
    ///   kernel lacks it, `EPERM` where a seccomp filter or
    ///   `kernel.io_uring_disabled` refuses it, `ENOMEM` past the locked-memory
    ///   limit).
    public init(configuration: Configuration) throws(Errno) {
        let requested = configuration.backend
        var reason: String?
        if requested == nil, let env = getenv("RINGIO_BACKEND"), String(cString: env).lowercased() == "threadpool" {
            reason = "RINGIO_BACKEND=threadpool"
        }
        if requested == .threadPool {
            reason = "the thread-pool backend was requested"
        }
        if reason == nil {
            do {
                let uring = try UringBackend.start(entries: configuration.ringEntries,
                                                   spinNanoseconds: configuration.idleSpin.clampedNanoseconds,
                                                   registerBuffers: configuration.registersBuffers,
                                                   fileSlots: Swift.max(0, Swift.min(configuration.registeredFileSlots, 32768)),
                                                   oldKernel: configuration.actsAsOldKernel)
                self.uring = uring
                self.core = uring
                self.queue = IOQueue(label: "ringio.engine", runner: uring)
                self.readBudget = ReadBudget(limit: configuration.readBufferLimit, queue: queue)
                self.timers = EngineTimerService()
                self.backend = .ioUring
                self.fallbackReason = nil
                return
            } catch {
                if requested == .ioUring { throw error }
                reason = IOEngine.explainSetupFailure(error)
            }
        }
        self.uring = nil
        let pool = ThreadPoolBackend()
        self.core = pool
        self.queue = IOQueue(label: "ringio.engine")
        self.readBudget = ReadBudget(limit: configuration.readBufferLimit, queue: queue)
        self.timers = EngineTimerService()
        self.backend = .threadPool
        self.fallbackReason = reason
    }

    init(threadPoolBecause reason: String) {
        self.uring = nil
        let pool = ThreadPoolBackend()
        self.core = pool
        self.queue = IOQueue(label: "ringio.engine")
        self.readBudget = ReadBudget(limit: ReadBudget.defaultLimit, queue: queue)
        self.timers = EngineTimerService()
        self.backend = .threadPool
        self.fallbackReason = reason
    }

    deinit {
        core.shutdown()
    }

    /// A human explanation of an `io_uring_setup` failure.
    static func explainSetupFailure(_ error: Errno) -> String {
        let disabled = IOEngine.ioUringDisabledSetting()
        switch error {
        case .noFunction:
            return "io_uring_setup: ENOSYS (this kernel has no io_uring, or a filter hides it)"
        case .notPermitted, .permissionDenied:
            if let disabled, disabled != 0 {
                return "io_uring_setup: \(error == .notPermitted ? "EPERM" : "EACCES") (/proc/sys/kernel/io_uring_disabled is \(disabled))"
            }
            return "io_uring_setup: \(error == .notPermitted ? "EPERM" : "EACCES") (refused, perhaps by a seccomp filter or container policy)"
        case .noMemory:
            return "io_uring_setup: ENOMEM (the locked-memory limit, RLIMIT_MEMLOCK, may be too low)"
        default:
            return "io_uring_setup: \(error)"
        }
    }

    /// The value of `/proc/sys/kernel/io_uring_disabled`, where the kernel has it.
    static func ioUringDisabledSetting() -> Int? {
        guard let fd = try? Syscall.open("/proc/sys/kernel/io_uring_disabled", flags: O_RDONLY | O_CLOEXEC) else { return nil }
        defer { Syscall.closeIgnoringErrors(fd) }
        var buffer = [UInt8](repeating: 0, count: 16)
        guard let n = try? buffer.withUnsafeMutableBytes({ (b) throws(Errno) in try Syscall.read(fd, into: b) }), n > 0 else {
            return nil
        }
        return Int(String(decoding: buffer[0..<n], as: UTF8.self).trimmingCharacters(whereSpace: true))
    }

    // MARK: - the request interface (SPI)

    /// Hands `request` to the backend. Never blocks on I/O; never drops a request.
    @_spi(Engine)
    public func submit(_ request: IORequest) {
        #if DEBUG
        core.submit(faults.apply(to: request))
        #else
        core.submit(request)
        #endif
    }

    /// Hands several requests to the backend at once (one lock, one wake-up).
    @_spi(Engine)
    public func submit(contentsOf requests: [IORequest]) {
        #if DEBUG
        core.submit(contentsOf: requests.map(faults.apply(to:)))
        #else
        core.submit(contentsOf: requests)
        #endif
    }

    /// The most requests one linked chain may hold.
    @_spi(Engine)
    public static let maximumChainLength = 16

    /// Hands `requests` to the backend as one linked chain (`IOSQE_IO_LINK`):
    /// each starts only after the one before it succeeded in full, and when
    /// one fails, or a read or write moves fewer bytes than it asked for,
    /// every later one completes with `-ECANCELED` without running. The
    /// thread-pool backend runs a chain in order on one worker, with the
    /// same rules.
    ///
    /// Cancelling a request of a chain that has not reached the kernel yet
    /// cancels the whole chain.
    ///
    /// - Precondition: `1...maximumChainLength` requests, none submitted before.
    ///
    /// `hardLinks` holds the indices of the requests whose link to the next
    /// one is hard (`IOSQE_IO_HARDLINK`): the next one runs whatever their
    /// result, as long as they ran (a request cancelled because an earlier
    /// soft link broke still cancels everything after it).
    @_spi(Engine)
    public func submit(linked requests: [IORequest], hardLinks: Set<Int> = []) {
        precondition((1...Self.maximumChainLength).contains(requests.count),
                     "a linked chain holds 1...\(Self.maximumChainLength) requests")
        if requests.count > 1 {
            let head = requests[0]
            head.chainLength = requests.count
            for (i, r) in requests.enumerated() {
                precondition(!r.isCancel, "a cancel cannot be part of a linked chain")
                r.chainHead = head
                r.linkNext = i < requests.count - 1
                r.hardLinkNext = r.linkNext && hardLinks.contains(i)
            }
        }
        core.submit(contentsOf: requests)
    }

    /// Whether this engine runs the chained-file operations
    /// (`IORequest.Operation.openChained` and the rest): on io_uring, a
    /// registered-file table and a kernel with `IORING_OP_FIXED_FD_INSTALL`
    /// (Linux 6.8); the thread pool always (plain fds).
    @_spi(Engine)
    public var supportsChainedFiles: Bool { uring?.supportsChainedFiles ?? true }

    /// Asks the backend to cancel `request`. It completes with `-ECANCELED`
    /// if the cancel reached it in time, else with its own result; either
    /// way exactly once, and its owner lives until then.
    ///
    /// The corresponding io_uring operation is `IORING_OP_ASYNC_CANCEL`.
    @_spi(Engine)
    public func cancel(_ request: IORequest) {
        #if DEBUG
        let request = faults.standIn(for: request) ?? request
        #endif
        core.submit(IORequest(.cancel(target: request)) { _ in })
    }

    /// The id of the thread that runs the completions of `.pollMultishot`
    /// watches (the ring thread, or the thread-pool backend's readiness
    /// loop once it runs), waiting up to `timeoutNanoseconds` for it to
    /// start; 0 when it did not. Signal sources forward signals to it.
    package func watchThreadID(timeoutNanoseconds: UInt64) -> Int32 {
        if let uring { return uring.threadID.wait(timeoutNanoseconds: timeoutNanoseconds) }
        return (core as? ThreadPoolBackend)?.readiness.threadID.wait(timeoutNanoseconds: timeoutNanoseconds) ?? 0
    }

    /// State that layers above keep per engine (the signal sources' signalfd,
    /// the file-system sources' inotify fd), one object per type.
    private let attachments = Locked<[ObjectIdentifier: any AnyObject & Sendable]>([:])

    /// The object of type `T` attached to this engine, made by `make` on
    /// first use.
    package func attachment<T: AnyObject & Sendable>(_ type: T.Type, _ make: () -> T) -> T {
        attachments.withLock { table in
            if let existing = table[ObjectIdentifier(type)] as? T { return existing }
            let made = make()
            table[ObjectIdentifier(type)] = made
            return made
        }
    }

    /// Whether a `.pollMultishot` watch stays armed after a readiness
    /// (io_uring on Linux 5.13 and later); otherwise it ends at each one.
    package var keepsWatchesArmed: Bool { uring?.multishotPolls ?? false }

    /// The number of `io_uring_enter` calls so far (io_uring only; for tests and benchmarks).
    @_spi(Engine)
    public var enterCalls: UInt64 { uring?.enterCalls ?? 0 }

    /// What the ring thread handed to queues (other than by running a
    /// handler inline): items, the reaps they came from, and the worker-pool
    /// submissions that took them over. io_uring only (all zero on the
    /// thread pool); for tests and benchmarks.
    @_spi(Engine)
    public struct DeliveryStatistics: Sendable, Equatable {
        /// Reaps whose completions handed at least one item to a queue.
        public var batches: Int
        /// Items handed to queues.
        public var items: Int
        /// Submissions to the worker pool (a thread wake-up at most each).
        public var poolSubmissions: Int
    }

    @_spi(Engine)
    public var deliveryStatistics: DeliveryStatistics {
        guard let delivery = uring?.delivery else { return DeliveryStatistics(batches: 0, items: 0, poolSubmissions: 0) }
        return DeliveryStatistics(batches: delivery.batches.load(ordering: .relaxed),
                                  items: delivery.items.load(ordering: .relaxed),
                                  poolSubmissions: delivery.poolSubmissions.load(ordering: .relaxed))
    }

    /// How the engine used its registered buffers and files so far (all
    /// zero on the thread pool; for tests and benchmarks).
    @_spi(Engine)
    public struct RegistrationStatistics: Sendable, Equatable {
        /// Pool buffers registered with the ring.
        public var buffersRegistered: Int
        /// Reads and writes issued as `READ_FIXED` / `WRITE_FIXED`.
        public var fixedBufferRequests: Int
        /// fds registered in the file table, and later unregistered.
        public var filesRegistered: Int
        public var filesUnregistered: Int
        /// Registrations given up because the file table was full.
        public var fileTableFull: Int
        /// Requests that named their fd by table index.
        public var fixedFileRequests: Int
    }

    @_spi(Engine)
    public var registrationStatistics: RegistrationStatistics {
        guard let counters = uring?.tables.counters else {
            return RegistrationStatistics(buffersRegistered: 0, fixedBufferRequests: 0, filesRegistered: 0,
                                          filesUnregistered: 0, fileTableFull: 0, fixedFileRequests: 0)
        }
        return RegistrationStatistics(buffersRegistered: counters.buffersRegistered.load(ordering: .relaxed),
                                      fixedBufferRequests: counters.fixedBufferRequests.load(ordering: .relaxed),
                                      filesRegistered: counters.filesRegistered.load(ordering: .relaxed),
                                      filesUnregistered: counters.filesUnregistered.load(ordering: .relaxed),
                                      fileTableFull: counters.fileTableFull.load(ordering: .relaxed),
                                      fixedFileRequests: counters.fixedFileRequests.load(ordering: .relaxed))
    }
}

extension String {
    fileprivate func trimmingCharacters(whereSpace: Bool) -> String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return String(s)
    }
}
