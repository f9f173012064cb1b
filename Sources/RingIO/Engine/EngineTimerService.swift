#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import RingIOBase
import RingIOQueue

/// The engine's timers: a heap of deadlines and one timeout request in the
/// engine for the earliest of them.
///
/// ```
///  arm(d) ──▶ heap ──(earliest changed)──▶ one IORING_OP_TIMEOUT (absolute)
///                                                   │ CQE
///  fire() ◀── every entry due by now ◀── pop ◀──────┘  then re-arm for the next
/// ```
///
/// - On io_uring the timeout is a ring request, so timers cost no thread:
///   the ring thread sleeps in `io_uring_enter` until the earliest deadline
///   or other work, and runs the due `fire` closures between reaps. On the
///   thread-pool backend the same request waits on one worker.
/// - One timeout for the earliest deadline, not one per timer: with 10,000
///   armed timers a new earliest deadline costs a heap insert, a cancel and
///   a new timeout; a deadline behind the earliest costs the insert only.
///   Cancelling a timer removes it from the table of live timers at once
///   and leaves its heap slot to be skipped when it reaches the top (the
///   heap is rebuilt when over half of it is dead).
/// - Never early: the due check compares against `ContinuousClock.now`, so
///   a timeout that the kernel ends a few nanoseconds before the Swift
///   clock agrees (the two are read at slightly different moments) fires
///   nothing and re-arms.
/// - A deadline whose window (`deadline ... deadline + leeway`) holds the
///   armed timeout does not move it: the timers share the wake-up.
package final class EngineTimerService: TimerService, @unchecked Sendable {
    // @unchecked: `state` is `Locked` (its `IORequest`s are not Sendable
    // values but are only handed to the backend); `backend`, `clock` and
    // the base instants are immutable.

    private struct Entry {
        let deadline: Int64
        let fire: @Sendable () -> Void
    }

    private struct State {
        var heap = TimerHeap()
        var live: [UInt64: Entry] = [:]
        var nextID: UInt64 = 1
        /// The timeout in the engine and its deadline.
        var armed: (request: IORequest, deadline: Int64)?
        /// The engine shut down (its timeout ended with `-ECANCELED`).
        var dead = false
    }

    private let state = Locked(State())
    /// The engine's backend. It holds this service back only through the
    /// timeout in flight, which its shutdown cancels.
    private let backend: any EngineBackend
    private let clock: clockid_t
    /// `ContinuousClock` instants are measured from `base`; the kernel's
    /// clock read just after it is `baseClockNanoseconds` (never earlier).
    private let base: ContinuousClock.Instant
    private let baseClockNanoseconds: Int64

    init(backend: any EngineBackend, clock: clockid_t) {
        self.backend = backend
        self.clock = clock
        (self.base, self.baseClockNanoseconds) = Self.calibrate(clock)
    }

    /// A `ContinuousClock` instant and the kernel clock's reading just
    /// after it, from the tightest of a few tries: a thread preempted (or
    /// a first vDSO call faulting) between the two reads would otherwise
    /// make every deadline late by that gap, for the engine's whole life.
    private static func calibrate(_ clock: clockid_t) -> (ContinuousClock.Instant, Int64) {
        func kernelNow() -> Int64 {
            var t = timespec()
            clock_gettime(clock, &t)
            return Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec)
        }
        var best: (instant: ContinuousClock.Instant, after: Int64, width: Int64)?
        for _ in 0..<16 {
            let before = kernelNow()
            let instant = ContinuousClock.now
            let after = kernelNow()
            if best == nil || after - before < best!.width { best = (instant, after, after - before) }
        }
        return (best!.instant, best!.after)
    }

    /// Nanoseconds from `base`, rounded up (a deadline is never moved earlier).
    private func nanoseconds(_ instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = (instant - base).components
        let (ns, rest) = attoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
        return seconds &* 1_000_000_000 &+ ns &+ (rest > 0 ? 1 : 0)
    }

    private var now: Int64 {
        let (seconds, attoseconds) = (ContinuousClock.now - base).components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }

    /// The number of timers armed and not yet fired or cancelled.
    package var count: Int { state.withLock { $0.live.count } }

    package func arm(deadline: ContinuousClock.Instant, leeway: Duration,
                     _ fire: @escaping @Sendable () -> Void) -> TimerToken {
        let d = nanoseconds(deadline)
        let slack = Int64(clamping: leeway.clampedNanoseconds)
        let (token, submit, cancel) = state.withLock { s -> (TimerToken, IORequest?, IORequest?) in
            let id = s.nextID
            s.nextID += 1
            s.live[id] = Entry(deadline: d, fire: fire)
            s.heap.push(deadline: d, id: id)
            if let armed = s.armed, armed.deadline >= d && armed.deadline - d <= slack {
                return (TimerToken(id: id), nil, nil)
            }
            if let armed = s.armed, armed.deadline <= d {
                return (TimerToken(id: id), nil, nil)
            }
            let old = s.armed?.request
            let request = makeAlarm(d)
            s.armed = (request, d)
            return (TimerToken(id: id), request, old)
        }
        if let submit { backend.submit(submit) }
        if let cancel { backend.submit(IORequest(.cancel(target: cancel)) { _ in }) }
        return token
    }

    @discardableResult
    package func cancel(_ token: TimerToken) -> Bool {
        state.withLock { s in
            guard s.live.removeValue(forKey: token.id) != nil else { return false }
            if s.heap.count > 64 && s.heap.count > 2 * s.live.count {
                s.heap.rebuild(keeping: { s.live[$0] != nil })
            }
            return true
        }
    }

    /// A timeout request for `deadline` (nanoseconds from `base`).
    private func makeAlarm(_ deadline: Int64) -> IORequest {
        let storage = TimeoutStorage(nanoseconds: baseClockNanoseconds &+ deadline)
        // The completion holds the service: the engine cancels the request
        // when it shuts down, which ends the cycle.
        return IORequest(.timeout(deadline: UnsafePointer(storage.pointer)), owner: storage) { [self] res in
            alarmEnded(storage, res: res)
        }
    }

    /// The engine's thread: fires what is due and arms the next timeout.
    private func alarmEnded(_ storage: TimeoutStorage, res: Int32) {
        var due: [@Sendable () -> Void] = []
        let next = state.withLock { s -> IORequest? in
            guard let armed = s.armed, armed.request.owner === storage else { return nil }  // replaced: stale
            s.armed = nil
            if res == -ECANCELED {
                // Cancelled though still the armed one: the engine shut down.
                s.dead = true
                return nil
            }
            let t = now
            while let top = s.heap.top {
                if s.live[top.id] == nil {
                    s.heap.pop()
                    continue
                }
                if top.deadline > t { break }
                s.heap.pop()
                if let e = s.live.removeValue(forKey: top.id) { due.append(e.fire) }
            }
            guard let top = s.heap.top else { return nil }
            let request = makeAlarm(top.deadline)
            s.armed = (request, top.deadline)
            return request
        }
        if let next { backend.submit(next) }
        for fire in due { fire() }
    }
}

/// The `__kernel_timespec` a timeout request points at, alive until its
/// completion (the request's owner).
private final class TimeoutStorage: Sendable {
    // `Sendable`: the pointer is written once, here, before the request is
    // submitted; afterwards only the kernel reads it.
    nonisolated(unsafe) let pointer: UnsafeMutablePointer<__kernel_timespec>

    init(nanoseconds: Int64) {
        pointer = .allocate(capacity: 1)
        let ns = max(0, nanoseconds)
        pointer.initialize(to: __kernel_timespec(tv_sec: ns / 1_000_000_000, tv_nsec: ns % 1_000_000_000))
    }

    deinit { pointer.deallocate() }
}

/// A binary min-heap of (deadline, id), ties broken by id (arming order).
struct TimerHeap {
    private(set) var items: [(deadline: Int64, id: UInt64)] = []

    var count: Int { items.count }
    var top: (deadline: Int64, id: UInt64)? { items.first }

    private static func less(_ a: (deadline: Int64, id: UInt64), _ b: (deadline: Int64, id: UInt64)) -> Bool {
        a.deadline != b.deadline ? a.deadline < b.deadline : a.id < b.id
    }

    mutating func push(deadline: Int64, id: UInt64) {
        items.append((deadline, id))
        var i = items.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            guard Self.less(items[i], items[parent]) else { break }
            items.swapAt(i, parent)
            i = parent
        }
    }

    mutating func pop() {
        guard !items.isEmpty else { return }
        items.swapAt(0, items.count - 1)
        items.removeLast()
        siftDown(0)
    }

    private mutating func siftDown(_ start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < items.count && Self.less(items[l], items[m]) { m = l }
            if r < items.count && Self.less(items[r], items[m]) { m = r }
            if m == i { return }
            items.swapAt(i, m)
            i = m
        }
    }

    /// Drops the entries `keeping` refuses and restores the heap order.
    mutating func rebuild(keeping: (UInt64) -> Bool) {
        items.removeAll { !keeping($0.id) }
        var i = items.count / 2
        while i > 0 {
            i -= 1
            siftDown(i)
        }
    }
}
