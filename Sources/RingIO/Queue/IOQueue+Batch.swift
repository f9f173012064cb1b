import Synchronization
import RingIOBase

/// The hand-offs of one reap, made at once.
///
/// While the ring thread runs the completions of one reap, every item they
/// enqueue on an `IOQueue` is collected here instead of going to its queue
/// at once. After the reap, each queue gets its items in one locked step
/// (in the order they were enqueued), and every pool job they need (a
/// serial queue's drain, a concurrent queue's items) goes to the worker
/// pool in one submission, with at most one thread wake-up. So 32
/// completions for one queue cost one enqueue and one wake, not 32.
///
/// Only the thread that runs `collect` is affected; other threads enqueue
/// as usual. Items for the ring queue (`IOEngine.queue`) are collected too
/// and run on the ring thread, as they would have.
// @unchecked: `pending`, `mixed`, `sole`, `groups`, `index` and `jobs` are touched only by the thread
// running `collect` (the ring thread that owns this batch), so they skip the
// runtime's dynamic exclusivity checks (`@exclusivity(unchecked)`); the
// statistics are atomics.
package final class DeliveryBatch: @unchecked Sendable {
    private static let current = ThreadLocalPointer()

    package init() {}

    @exclusivity(unchecked) private var pending: [(queue: IOQueue, item: IOQueue.Item)] = []
    @exclusivity(unchecked) private var groups: [(queue: IOQueue, items: [IOQueue.Item])] = []
    @exclusivity(unchecked) private var index: [ObjectIdentifier: Int] = [:]
    @exclusivity(unchecked) private var jobs: [PoolJob] = []

    /// Reaps that handed at least one item to a queue.
    package let batches = Atomic<Int>(0)
    /// Items handed to queues.
    package let items = Atomic<Int>(0)
    /// Submissions to the worker pool (at most one per batch).
    package let poolSubmissions = Atomic<Int>(0)

    /// The batch collecting the calling thread's enqueues, if any.
    @inline(__always)
    package static var active: DeliveryBatch? {
        guard let raw = current.value else { return nil }
        return Unmanaged<DeliveryBatch>.fromOpaque(raw).takeUnretainedValue()
    }

    /// Runs `body` (the completions of one reap) collecting the calling
    /// thread's enqueues, then hands them over.
    package func collect(_ body: () -> Void) {
        let previous = Self.current.value
        Self.current.value = Unmanaged.passUnretained(self).toOpaque()
        body()
        Self.current.value = previous
        flush()
    }

    func add(_ queue: IOQueue, _ item: IOQueue.Item) {
        if !mixed, let first = pending.first?.queue, first !== queue { mixed = true }
        pending.append((queue, item))
    }

    /// `pending` holds items of more than one queue.
    @exclusivity(unchecked) private var mixed = false
    @exclusivity(unchecked) private var sole: [IOQueue.Item] = []

    private func flush() {
        guard !pending.isEmpty else { return }
        let count = pending.count
        defer {
            batches.add(1, ordering: .relaxed)
            items.add(count, ordering: .relaxed)
            if !jobs.isEmpty {
                poolSubmissions.add(1, ordering: .relaxed)
                WorkerPool.shared.submit(contentsOf: jobs)
                jobs.removeAll(keepingCapacity: true)
            }
        }
        if !mixed {
            // The common case: every item is for one queue.
            let queue = pending[0].queue
            for (_, item) in pending { sole.append(item) }
            pending.removeAll(keepingCapacity: true)
            queue.enqueue(batch: sole, jobs: &jobs)
            sole.removeAll(keepingCapacity: true)
            return
        }
        mixed = false
        for (queue, item) in pending {
            let id = ObjectIdentifier(queue)
            if let i = index[id] {
                groups[i].items.append(item)
            } else {
                index[id] = groups.count
                groups.append((queue, [item]))
            }
        }
        pending.removeAll(keepingCapacity: true)
        index.removeAll(keepingCapacity: true)
        for group in groups { group.queue.enqueue(batch: group.items, jobs: &jobs) }
        groups.removeAll(keepingCapacity: true)
    }
}

extension IOQueue {
    /// Appends `items` (in order) with one locked step; the pool jobs they
    /// need go to `jobs` instead of the pool.
    func enqueue(batch items: [Item], jobs: inout [PoolJob]) {
        switch kind {
        case .serial:
            let schedule = state.withLock { s -> Bool in
                for item in items { s.items.append(item) }
                if !s.scheduled && s.suspendCount == 0 {
                    s.scheduled = true
                    s.drainPending = true
                    return true
                }
                return false
            }
            if schedule {
                if let runner, runner.scheduleDrain(self) { return }
                if routeTarget != nil { return submitDrain() }
                jobs.append(.drain(self))
            }
        case .concurrent:
            var start: [Item] = []
            state.withLock { s in
                for item in items {
                    if s.suspendCount == 0 && s.items.isEmpty && !s.barrierActive {
                        if !item.isBarrier {
                            s.running += 1
                            start.append(item)
                            continue
                        }
                        if s.running == 0 {
                            s.running = 1
                            s.barrierActive = true
                            start.append(item)
                            continue
                        }
                    }
                    s.items.append(item)
                }
            }
            if routeTarget != nil { return start.forEach(startConcurrent) }
            for item in start {
                switch item {
                case .work(let work, let barrier): jobs.append(.concurrent(self, work, barrier: barrier))
                case .sync(let waiter, _): waiter.grant()
                case .job(let job, _):
                    jobs.append(.concurrent(self, { job.runSynchronously(on: self.asUnownedTaskExecutor()) },
                                            barrier: false))
                }
            }
        }
    }
}
