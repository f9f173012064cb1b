import RingIOBase
import Synchronization

/// A queue of work items that run on RingIO's own worker threads.
///
/// Every completion handler of the library runs on an `IOQueue`, never on a
/// Dispatch queue, and on the engine's ring thread only when that queue is
/// the engine's own, `IOEngine.queue`.
///
/// - A **serial** queue runs one item at a time, in submission order. It can be
///   an actor's executor (see `IOQueue+Executor.swift`).
/// - A **concurrent** queue runs items in parallel on the worker pool;
///   `asyncBarrier` items run alone, after every earlier item and before every
///   later one.
///
/// Queues are cheap: a queue is a small locked state (a FIFO of items and a few
/// counters); it holds no thread. A serial queue that has work occupies one
/// worker at a time and yields it to other queues every
/// `IOQueue.serialDrainBudget` items.
///
/// The corresponding libdispatch type is `dispatch_queue_t`.
public final class IOQueue: Sendable {
    /// Whether a queue runs one item at a time or many.
    public enum Kind: Sendable {
        /// One item at a time, in FIFO order (`DISPATCH_QUEUE_SERIAL`).
        case serial
        /// Many items at once (`DISPATCH_QUEUE_CONCURRENT`).
        case concurrent
    }

    /// The queue's name, for debugging.
    public let label: String
    /// Serial or concurrent.
    public let kind: Kind

    /// The items a serial queue runs before it hands its worker to other queues.
    static let serialDrainBudget = 256

    enum Item: Sendable {
        case work(@Sendable () -> Void, barrier: Bool)
        case sync(SyncWaiter, barrier: Bool)
        /// A task's or an actor's job, kept as is (no closure to allocate).
        /// `isolated`: an actor's (it runs isolated to this serial queue);
        /// otherwise a task's that prefers this queue (it runs as a
        /// nonisolated task on it). See `IOQueue+Executor.swift`.
        case job(UnownedJob, isolated: Bool)

        var isBarrier: Bool {
            switch self {
            case .work(_, let barrier), .sync(_, let barrier): return barrier
            case .job: return false
            }
        }
    }

    struct State {
        var items = RingBuffer<Item>(initialCapacity: 16)
        var suspendCount = 0
        /// Serial: a worker (or a `sync` caller) owns the queue.
        var scheduled = false
        /// Serial: the owner is a drain job submitted to the pool and not yet
        /// started (a `sync` caller may take it over: see `IOQueue+Serial.swift`).
        var drainPending = false
        /// Serial: `.sync` items in `items`.
        var syncWaiters = 0
        /// Concurrent: items started and not yet finished.
        var running = 0
        /// Concurrent: a barrier is running.
        var barrierActive = false
        /// Serial: a `sync` caller may run the async items ahead of its own
        /// (false for a queue with a target or the main queue).
        var drainersAllowed = true
        /// `setSpecific` values, by key (`IOQueue+Specific.swift`).
        var specifics: [ObjectIdentifier: any Sendable] = [:]
    }

    let state = Locked(State())

    /// Where a serial queue's drain runs instead of the worker pool (an
    /// engine's ring thread, for `IOEngine.queue`); `nil`: the pool.
    let runner: (any QueueRunner)?

    /// This queue as an actor's serial executor (`IOQueue+Executor.swift`).
    let serialExecutor = IOQueueSerialExecutor()

    /// Task and actor jobs run by a serial queue (for tests: each `await`
    /// of a task on the queue should cost one).
    package let jobsRun = Atomic<Int>(0)

    /// The queue's priority as given at creation (see `priority` for the
    /// effective one).
    let ownPriority: Priority
    /// The queue this one runs its items on (`nil`: the worker pool at its
    /// priority). Fixed at creation, so a chain of targets has no cycle.
    package let target: IOQueue?
    /// The effective priority: the higher of its own and its target's.
    public let priority: Priority
    /// `priority.rawValue`: the worker pool's level for this queue's jobs.
    let level: Int
    /// The target its drains and items go through, when that is not a
    /// global queue (a global target only sets the priority).
    let routeTarget: IOQueue?
    /// A global queue (`IOQueue.global(priority:)`): its items go straight
    /// to the pool.
    let isGlobalRoot: Bool

    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - label: A name shown in debuggers and diagnostics.
    ///   - kind: `.serial` (the default) or `.concurrent`.
    public convenience init(label: String, kind: Kind = .serial) {
        self.init(label: label, kind: kind, priority: .default, target: nil, runner: nil, globalRoot: false)
    }

    /// A serial queue whose items `runner` runs (on its own thread).
    package convenience init(label: String, runner: any QueueRunner) {
        self.init(label: label, kind: .serial, priority: .default, target: nil, runner: runner, globalRoot: false)
    }

    init(label: String, kind: Kind, priority: Priority, target: IOQueue?, runner: (any QueueRunner)?,
         globalRoot: Bool) {
        self.label = label
        self.kind = kind
        self.runner = runner
        self.ownPriority = priority
        self.target = target
        let effective = Swift.max(priority, target?.priority ?? priority)
        self.priority = effective
        self.level = effective.rawValue
        self.isGlobalRoot = globalRoot
        self.routeTarget = (target?.isGlobalRoot ?? true) ? nil : target
        serialExecutor.bind(self)
        if routeTarget != nil || runner is MainQueueRunner {
            // Its items must run under its target's (or the main thread's)
            // ownership: no `sync` caller runs them on its own thread.
            state.withLock { $0.drainersAllowed = false }
        }
    }

    /// The shared concurrent queue: `global(priority: .default)`.
    public static var global: IOQueue { globals[Priority.default.rawValue] }

    // MARK: - async

    /// Schedules `work` to run on the queue and returns at once.
    ///
    /// The corresponding libdispatch function is `dispatch_async`.
    public func async(_ work: @escaping @Sendable () -> Void) {
        enqueue(.work(work, barrier: false))
    }

    /// Schedules `work` to run alone: on a concurrent queue it starts after
    /// every earlier item has finished, and later items wait for it. On a
    /// serial queue it is the same as `async`.
    ///
    /// The corresponding libdispatch function is `dispatch_barrier_async`.
    public func asyncBarrier(_ work: @escaping @Sendable () -> Void) {
        enqueue(.work(work, barrier: kind == .concurrent))
    }

    func enqueue(_ item: Item) {
        // The ring thread reaping: handed over with the rest of the reap
        // (IOQueue+Batch.swift).
        if let batch = DeliveryBatch.active { return batch.add(self, item) }
        switch kind {
        case .serial:
            let schedule = state.withLock { s -> Bool in
                s.items.append(item)
                if !s.scheduled && s.suspendCount == 0 {
                    s.scheduled = true
                    s.drainPending = true
                    return true
                }
                return false
            }
            if schedule { submitDrain() }
        case .concurrent:
            let start = state.withLock { s -> Bool in
                if s.suspendCount == 0 && s.items.isEmpty && !s.barrierActive {
                    if !item.isBarrier {
                        s.running += 1
                        return true
                    }
                    if s.running == 0 {
                        s.running = 1
                        s.barrierActive = true
                        return true
                    }
                }
                s.items.append(item)
                return false
            }
            if start { startConcurrent(item) }
        }
    }

    // MARK: - sync

    /// Runs `work` on the queue and waits for it to finish; returns its result.
    ///
    /// `work` runs on the calling thread once the queue is its own (after every
    /// earlier item of a serial queue), as libdispatch does, so no worker thread
    /// is held while the caller waits.
    ///
    /// On a serial queue, ownership passes straight from one `sync` caller to
    /// the next; a caller that waits behind async items no worker has started
    /// runs them itself, in order, before `work` (see `IOQueue+Serial.swift`).
    /// So `sync` never waits for a free pool worker: a pool whose workers all
    /// wait in `sync` cannot deadlock on itself.
    ///
    /// - Precondition: the caller is not running on this serial queue (that
    ///   would wait for itself forever).
    ///
    /// The corresponding libdispatch function is `dispatch_sync`.
    public func sync<T>(_ work: () throws -> T) rethrows -> T {
        switch kind {
        case .serial:
            precondition(
                !IOQueue.isCurrentThreadRunning(self),
                "IOQueue.sync onto the serial queue '\(label)' from a work item running on that queue: this would deadlock"
            )
            acquireSerialOwnership()
            defer { releaseSerialOwnership() }
            if let routeTarget {
                // The target's domain too (after this queue's: its drains
                // wait in the target's FIFO, never the other way round).
                return try routeTarget.sync { try IOQueue.withCurrent(self, work) }
            }
            return try IOQueue.withCurrent(self, work)
        case .concurrent:
            var waiter: SyncWaiter?
            state.withLock { s in
                if s.suspendCount == 0 && s.items.isEmpty && !s.barrierActive {
                    s.running += 1
                } else {
                    let w = SyncWaiter()
                    s.items.append(.sync(w, barrier: false))
                    waiter = w
                }
            }
            _ = waiter?.wait()
            defer { finishConcurrent(barrier: false) }
            if let routeTarget { return try routeTarget.sync { try IOQueue.withCurrent(self, work) } }
            return try IOQueue.withCurrent(self, work)
        }
    }

    // MARK: - suspend / resume

    /// Stops the queue from starting new items; items already running finish.
    /// Calls are counted: the queue runs again after as many `resume()` calls.
    ///
    /// The corresponding libdispatch function is `dispatch_suspend`.
    public func suspend() {
        state.withLock { $0.suspendCount += 1 }
    }

    /// Undoes one `suspend()`.
    ///
    /// - Precondition: the queue is suspended (more resumes than suspends is a
    ///   programmer error, as in libdispatch).
    ///
    /// The corresponding libdispatch function is `dispatch_resume`.
    public func resume() {
        switch kind {
        case .serial:
            let handoff = state.withLock { s -> SerialHandoff in
                precondition(s.suspendCount > 0, "IOQueue.resume() on '\(label)' without a matching suspend()")
                s.suspendCount -= 1
                if s.suspendCount == 0 && !s.scheduled && !s.items.isEmpty {
                    s.scheduled = true
                    return IOQueue.serialHandoff(&s)
                }
                return .none
            }
            perform(handoff)
        case .concurrent:
            let toStart = state.withLock { s -> [Item]? in
                precondition(s.suspendCount > 0, "IOQueue.resume() on '\(label)' without a matching suspend()")
                s.suspendCount -= 1
                return IOQueue.pumpConcurrent(&s)
            }
            toStart?.forEach(startConcurrent)
        }
    }

    /// Whether the queue is suspended now (for diagnostics and tests).
    var isSuspended: Bool { state.withLock { $0.suspendCount > 0 } }

    /// The items submitted and not started yet (for tests).
    package var waitingItemCount: Int { state.withLock { $0.items.count } }

    // MARK: - concurrent running

    func startConcurrent(_ item: Item) {
        switch item {
        case .work(let work, let barrier):
            if let routeTarget {
                return routeTarget.enqueue(.work({ self.runConcurrent(work, barrier: barrier) }, barrier: false))
            }
            WorkerPool.shared.submit(.concurrent(self, work, barrier: barrier))
        case .sync(let waiter, _):
            waiter.grant()
        case .job(let job, _):
            let work: @Sendable () -> Void = { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
            if let routeTarget {
                return routeTarget.enqueue(.work({ self.runConcurrent(work, barrier: false) }, barrier: false))
            }
            WorkerPool.shared.submit(.concurrent(self, work, barrier: false))
        }
    }

    func runConcurrent(_ work: @Sendable () -> Void, barrier: Bool) {
        IOQueue.withCurrent(self, work)
        finishConcurrent(barrier: barrier)
    }

    func finishConcurrent(barrier: Bool) {
        let toStart = state.withLock { s -> [Item]? in
            s.running -= 1
            if barrier { s.barrierActive = false }
            return IOQueue.pumpConcurrent(&s)
        }
        toStart?.forEach(startConcurrent)
    }

    /// Moves the items that may start now out of the FIFO, marking them running.
    private static func pumpConcurrent(_ s: inout State) -> [Item]? {
        guard !s.items.isEmpty, s.suspendCount == 0, !s.barrierActive else { return nil }
        var out: [Item] = []
        while let first = s.items.first {
            if first.isBarrier {
                if s.running == 0 {
                    _ = s.items.popFirst()
                    s.running = 1
                    s.barrierActive = true
                    out.append(first)
                }
                break
            }
            _ = s.items.popFirst()
            s.running += 1
            out.append(first)
        }
        return out
    }
}

extension IOQueue: CustomStringConvertible {
    public var description: String { "IOQueue(\(label), \(kind))" }
}

// MARK: - the current queue

/// One entry of the per-thread stack of queues the thread is running work of.
struct QueueFrame {
    let queue: Unmanaged<IOQueue>
    let parent: UnsafeMutableRawPointer?
}

private let currentFrame = ThreadLocalPointer()

extension IOQueue {
    /// Runs `body` with `queue` pushed on this thread's stack of current queues.
    @inline(__always)
    static func withCurrent<R>(_ queue: IOQueue, _ body: () throws -> R) rethrows -> R {
        let parent = currentFrame.value
        var frame = QueueFrame(queue: .passUnretained(queue), parent: parent)
        return try withUnsafeMutablePointer(to: &frame) { pointer in
            currentFrame.value = UnsafeMutableRawPointer(pointer)
            defer { currentFrame.value = parent }
            return try body()
        }
    }

    /// Whether the calling thread is running an item of `queue` (possibly below
    /// a `sync` onto another queue).
    static func isCurrentThreadRunning(_ queue: IOQueue) -> Bool {
        var cursor = currentFrame.value
        while let raw = cursor {
            let frame = raw.assumingMemoryBound(to: QueueFrame.self).pointee
            if frame.queue.toOpaque() == Unmanaged.passUnretained(queue).toOpaque() { return true }
            cursor = frame.parent
        }
        return false
    }

    /// The queue whose item the calling thread runs, if any.
    static var current: IOQueue? {
        guard let raw = currentFrame.value else { return nil }
        return raw.assumingMemoryBound(to: QueueFrame.self).pointee.queue.takeUnretainedValue()
    }

    /// Whether the calling code runs on this queue: an item of it, or of a
    /// queue that targets it (directly or through other targets).
    ///
    /// The corresponding libdispatch function is `dispatch_assert_queue`
    /// (as a test rather than an assertion).
    public var isCurrent: Bool {
        var cursor = currentFrame.value
        let me = Unmanaged.passUnretained(self).toOpaque()
        while let raw = cursor {
            let frame = raw.assumingMemoryBound(to: QueueFrame.self).pointee
            var queue: IOQueue? = frame.queue.takeUnretainedValue()
            while let q = queue {
                if Unmanaged.passUnretained(q).toOpaque() == me { return true }
                queue = q.target
            }
            cursor = frame.parent
        }
        return false
    }
}
