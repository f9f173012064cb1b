#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import RingIOBase

/// The pending `asyncAfter` items of the process: one heap here, and one
/// timer on the ``TimerService`` for the earliest of them.
///
/// ```
///  asyncAfter ──▶ heap (caller's thread) ──(new earliest)──▶ one service timer
///                                                                 │ fires
///  queue.async ◀── every item due by now ◀── pool job ◀── one pool job
/// ```
///
/// The service's thread (a pool worker, or the fallback's timer thread)
/// does one thing per expiry, whatever the number of items due: it submits
/// one pool job. That job takes the due items off the heap, hands them to
/// their queues in one batch and arms the service for the next deadline.
/// So the per-item work (heap pops, enqueues) runs on the worker pool, not
/// on the one service thread: beside busy threads, one thread firing
/// 100,000 items fell 0.5 s behind (its fair share of the CPU could not keep
/// up), where the pool's workers keep up.
///
/// Never early: the job compares each deadline with `ContinuousClock.now`;
/// equal deadlines go in arming order. No thread per item; an item costs
/// O(log n) on the caller's thread and on the worker.
package final class AfterScheduler: @unchecked Sendable {
    // @unchecked: every stored `var` is read and written only with `lock`
    // held.
    /// The deadlines, each with the slot where its item and queue wait in
    /// `slots` as payload (plain data: nothing to retain while it sifts).
    private typealias Heap = DeadlineHeap<Int>

    /// The process's scheduler, on `TimerServices.current`.
    package static let shared = AfterScheduler(services: nil)

    private let lock = PlainLock()
    /// Held by the thread taking due items off the heap and handing them
    /// over (taken after `lock`'s sections, never inside one).
    private let delivery = PlainLock()
    private let epoch = ContinuousClock.now
    /// The registry whose current service it arms (nil: the process's).
    private let services: TimerServiceRegistry?
    private var heap = Heap()
    /// The pending items, by slot; `nil`: a free slot.
    private var slots: [(queue: IOQueue, item: IOQueue.Item)?] = []
    private var freeSlots: [Int] = []
    private var armed: UInt64 = 0
    /// The service timer armed for the heap's top: its deadline and token,
    /// and its number (a fire whose number is not this one's is stale).
    private var timer: (when: Int64, token: TimerToken, service: any TimerService, number: UInt64)?
    private var timersArmed: UInt64 = 0
    /// A pool job is on its way to take what is due (it arms the next timer).
    private var draining = false

    /// - Parameter services: the registry whose service to arm (tests);
    ///   nil for the process's (`TimerServices.current`).
    package init(services: TimerServiceRegistry?) {
        self.services = services
    }

    /// Items waiting for their deadline (for tests).
    package var pendingCount: Int { lock.withLock { heap.count } }

    /// Queues `item` on `queue` at `deadline`, never before.
    ///
    /// `now` (the caller's look at the clock, if it has one): items due by
    /// then are handed over by this call, on the caller's thread, when no
    /// other thread is handing items over. A program that keeps calling
    /// `asyncAfter` so delivers what is due without waiting for the timer's
    /// thread and a worker (beside busy threads, each can wait milliseconds
    /// for a CPU).
    func schedule(_ item: IOQueue.Item, on queue: IOQueue, at deadline: ContinuousClock.Instant,
                  now: ContinuousClock.Instant? = nil) {
        let when = nanoseconds(deadline, roundingUp: true)
        lock.lock()
        armed &+= 1
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            slots[slot] = (queue, item)
        } else {
            slot = slots.count
            slots.append((queue, item))
        }
        heap.push(when: when, sequence: armed, payload: slot)
        // A drain on its way re-arms for the new top when it ends.
        if !draining, timer.map({ when < $0.when }) ?? true {
            armTimer(for: when)
        }
        let nowNanoseconds = now.map { nanoseconds($0, roundingUp: false) }
        let due = nowNanoseconds.map { heap.first!.when <= $0 } ?? false
        lock.unlock()
        guard due, let nowNanoseconds, pthread_mutex_trylock(delivery.mutex) == 0 else { return }
        lock.lock()
        let items = takeDue(by: nowNanoseconds)
        lock.unlock()
        deliver(items)
        delivery.unlock()
    }

    /// Under the lock: the items due by `now`, in deadline order, off the heap.
    private func takeDue(by now: Int64) -> [(IOQueue, IOQueue.Item)] {
        var due: [(IOQueue, IOQueue.Item)] = []
        while let head = heap.first, head.when <= now {
            due.append(slots[head.payload].take()!)
            freeSlots.append(head.payload)
            heap.popFirst()
        }
        return due
    }

    /// `instant` as nanoseconds from `epoch` (clamped to about ±285
    /// years), rounded up for a deadline (never moved earlier) and down for
    /// the time now.
    private func nanoseconds(_ instant: ContinuousClock.Instant, roundingUp: Bool) -> Int64 {
        let (seconds, attoseconds) = (instant - epoch).components
        let clamped = Swift.min(Swift.max(seconds, -9_000_000_000), 9_000_000_000)
        let (ns, rest) = attoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
        return clamped * 1_000_000_000 + ns + (roundingUp && rest > 0 ? 1 : 0)
    }

    /// Arms the service for `when`, replacing the timer armed before. Under
    /// the lock: the services never call back into a scheduler from `arm` or
    /// `cancel` (a fire comes later, on the service's thread, and takes the
    /// lock then).
    private func armTimer(for when: Int64) {
        if let old = timer { old.service.cancel(old.token) }
        timersArmed &+= 1
        let number = timersArmed
        let service = services?.current ?? TimerServices.current
        let token = service.arm(deadline: epoch + .nanoseconds(when), leeway: .zero) { [self] in fired(number) }
        timer = (when, token, service, number)
    }

    /// The service's thread: one pool job takes what is due.
    private func fired(_ number: UInt64) {
        lock.lock()
        guard let current = timer, current.number == number else {
            // Replaced by an earlier deadline; its cancel came too late.
            lock.unlock()
            return
        }
        timer = nil
        draining = true
        lock.unlock()
        WorkerPool.shared.submit(.plain({ [self] in drain() }, level: IOQueue.Priority.userInteractive.rawValue))
    }

    /// A worker: hands every item due by now to its queue, in deadline
    /// order, in one batch; arms the service for the next.
    private func drain() {
        delivery.lock()
        lock.lock()
        let due = takeDue(by: nanoseconds(.now, roundingUp: false))
        draining = false
        if let next = heap.first { armTimer(for: next.when) }
        lock.unlock()
        deliver(due)
        delivery.unlock()
    }

    /// Hands `due` to their queues in one batch. With `delivery` held: one
    /// thread at a time takes and hands over, so the items of one queue
    /// reach it in deadline order.
    private func deliver(_ due: [(IOQueue, IOQueue.Item)]) {
        guard !due.isEmpty else { return }
        DeliveryBatch().collect {
            // A global queue's plain items go as a few jobs that take them in
            // turn (`AfterRun`); the rest one item each, in deadline order.
            var runs: [Int: [@Sendable () -> Void]] = [:]
            for (queue, item) in due {
                if queue.isGlobalRoot, case .work(let work, barrier: false) = item {
                    runs[queue.level, default: []].append(work)
                } else {
                    queue.enqueue(item)
                }
            }
            for (level, works) in runs {
                let queue = IOQueue.globals[level]
                if works.count < AfterRun.smallest {
                    for work in works { queue.enqueue(.work(work, barrier: false)) }
                } else {
                    AfterRun(works, on: queue).start()
                }
            }
        }
    }
}

/// Items due at once on a global queue, run by a few pool jobs that take
/// them in turn, not one job each: a job claims the next item with one
/// atomic step, where a job of its own costs the pool's and the queue's
/// locks twice (beside busy threads, a worker preempted while it holds one
/// stalls the others). Nothing is lost against one job per item:
///
/// - Parallel: `min(items / smallest, workers)` jobs start at once.
/// - Fair: a job gives its worker back after `sliceItems` items or
///   `sliceNanoseconds`, and the next job of the run is already queued.
/// - Live: while items are left unclaimed, one job of the run waits in the
///   pool, so an item that blocks leaves the rest to that job (and, when
///   every worker blocks, to the thread the pool adds for it).
final class AfterRun: @unchecked Sendable {
    // @unchecked: `works` is immutable; `next` and `queuedJobs` are atomics.
    static let smallest = 8
    static let sliceItems = 64
    static let sliceNanoseconds: UInt64 = 500_000

    private let works: [@Sendable () -> Void]
    private let queue: IOQueue
    private let next = Atomic<Int>(0)
    /// Jobs of this run queued and not started yet.
    private let queuedJobs = Atomic<Int>(0)

    init(_ works: [@Sendable () -> Void], on queue: IOQueue) {
        self.works = works
        self.queue = queue
    }

    func start() {
        let jobs = Swift.max(1, Swift.min(works.count / Self.smallest, WorkerPool.shared.baseThreads))
        for _ in 0..<jobs { submitJob() }
    }

    private func submitJob() {
        queuedJobs.add(1, ordering: .relaxed)
        queue.enqueue(.work({ [self] in run() }, barrier: false))
    }

    private func run() {
        queuedJobs.subtract(1, ordering: .relaxed)
        let end = monotonicNanoseconds() &+ Self.sliceNanoseconds
        var ran = 0
        while true {
            let i = next.wrappingAdd(1, ordering: .relaxed).oldValue
            guard i < works.count else { return }
            if i + 1 < works.count && queuedJobs.load(ordering: .relaxed) == 0 { submitJob() }
            works[i]()
            ran += 1
            if ran >= Self.sliceItems || monotonicNanoseconds() >= end {
                if queuedJobs.load(ordering: .relaxed) == 0 && next.load(ordering: .relaxed) < works.count { submitJob() }
                return
            }
        }
    }
}
