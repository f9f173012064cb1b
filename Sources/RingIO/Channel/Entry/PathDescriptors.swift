#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import RingIOBase

/// The fds that path channels hold open, for the whole process (the fd
/// limit is the process's): how many there are, which channels may let go
/// of theirs, and the opens that wait for one to close.
///
/// A path channel keeps its fd while it is used. Once more of them are open
/// than half the soft `RLIMIT_NOFILE`, the least recently used idle ones
/// (nothing queued, running or left to return; not pinned by
/// `fileDescriptor`) let go of theirs, down to three quarters of that cap,
/// and any that goes idle while the cap is exceeded does too; each opens
/// its path again on its next use. An open that fails with `EMFILE` or
/// `ENFILE` while a path channel's fd may still close by itself (a channel
/// that may let go of its fd, one whose close is under way, or another
/// open that was woken and may become one) waits for a path channel's fd
/// to close, then tries again. Once none may (the last was pinned, or
/// opened no fd it may let go of), every waiting open tries once more, and
/// fails if that fails: it never waits for a close only the user can make.
///
/// The limit is read once (`getrlimit`), and again after an open fails with
/// `EMFILE` or `ENFILE`, so that a limit the program changed with
/// `setrlimit` counts from its next `EMFILE`.
// @unchecked: every `var` is read and written with `lock` held; `pressure`
// is atomic.
final class PathDescriptors: @unchecked Sendable {
    typealias Retry = @Sendable () -> Void

    static let shared = PathDescriptors()

    private let lock = PlainLock()
    /// Fds opened by path channels and not closed yet.
    private var open = 0
    /// The path channels with an fd they may let go of.
    private var holders: [ObjectIdentifier: ChannelCore] = [:]
    /// Fds of path channels that closed or let go of them, not closed yet:
    /// each closes once its last handler returns, with no one's help.
    private var closing = 0
    /// Opens that failed with `EMFILE` or `ENFILE`: each tries again once a
    /// path channel's fd closes.
    private var waiters = RingBuffer<Retry>(initialCapacity: 4)
    /// Waiters woken that have not said how their open went yet (`opened`,
    /// `waitForClose`, `retryFailed`): each may become a holder.
    private var retrying = 0
    /// Opens and waits since the last search for idle channels. A search
    /// visits every holder, so it is made when the pressure begins and then
    /// once per `cap / 8` of them; meanwhile a channel that goes idle lets
    /// go of its fd by itself (`ChannelCore.releaseUnderPressure`).
    private var eventsSinceSearch = 0
    /// The most fds path channels should hold (half the soft limit, at least 16).
    private var cap = 512
    /// `cap` was computed from the limit (once, then after each `EMFILE`).
    private var limitRead = false
    /// More are open than `cap`, or opens wait: a channel that goes idle
    /// lets go of its fd at once.
    let pressure = Atomic<Bool>(false)
    /// The clock of `ChannelCore.lastUse`: ticks once per path channel use.
    let clock = Atomic<UInt64>(0)

    /// `holder` has an fd it may let go of. (Called with its lock held:
    /// the order is channel, then this; this calls no channel with its own
    /// lock held.)
    func hold(_ holder: ChannelCore) {
        lock.withLock { holders[ObjectIdentifier(holder)] = holder }
    }

    /// A path channel opened an fd (after `hold`, if it may let go of it).
    /// `retried`: the open was a woken waiter's. `closing`: the channel was
    /// closed meanwhile, the fd closes once its handlers return.
    func opened(retried: Bool = false, closing closes: Bool = false) {
        let (excess, stalled) = lock.withLock { () -> (Int, [Retry]) in
            let before = pressure.load(ordering: .relaxed)
            open += 1
            if retried { retrying -= 1 }
            if closes { closing += 1 }
            if !limitRead { readLimitLocked() }
            updatePressureLocked()
            let stalled = stalledLocked()
            guard open > cap, searchNowLocked(pressureBefore: before) else { return (0, stalled) }
            return (open - cap * 3 / 4, stalled)
        }
        if excess > 0 { releaseIdle(count: excess) }
        Self.run(stalled)
    }

    /// A path channel's fd closed: an open waiting for one tries again.
    func closed() {
        let waiter = lock.withLock { () -> Retry? in
            open -= 1
            closing -= 1
            let next = waiters.popFirst()
            if next != nil { retrying += 1 }
            updatePressureLocked()
            _invariantCheckLocked()
            return next
        }
        waiter?()
    }

    /// `holder` no longer has an fd it may let go of: it let go of it or
    /// closed (`closing`: its fd closes by itself, soon), or was pinned.
    /// Called with its lock held: returns the waiting opens to try again
    /// once it is released (`run`), when no fd may close by itself now.
    func forget(_ holder: ChannelCore, closing closes: Bool) -> [Retry] {
        lock.withLock {
            let removed = holders.removeValue(forKey: ObjectIdentifier(holder)) != nil
            if closes { closing += 1 }
            return removed ? stalledLocked() : []
        }
    }

    /// An open that failed with `EMFILE` or `ENFILE` (`retried`: a woken
    /// waiter's): if a path channel's fd may still close by itself, `retry`
    /// runs once one closes (the idle holders are asked to let go of
    /// theirs now), and this returns true; false when none may (the open
    /// fails with the error, as it always did: a FIFO's fd or one the user
    /// has seen through `fileDescriptor` closes only when the user says
    /// so, and waiting for it could be waiting forever). Reads the limit
    /// again (the program may have changed it).
    func waitForClose(retried: Bool = false, _ retry: @escaping Retry) -> Bool {
        let (search, stalled) = lock.withLock { () -> (Int?, [Retry]) in
            if retried { retrying -= 1 }
            readLimitLocked()
            guard !holders.isEmpty || closing > 0 || retrying > 0 else {
                // Nothing will close by itself: the others waiting try once more.
                return (nil, stalledLocked())
            }
            let before = pressure.load(ordering: .relaxed)
            waiters.append(retry)
            updatePressureLocked()
            // At least one idle holder is asked at each wait: holders that
            // went idle before the pressure began let go of their fds only
            // when asked, and a wait that asks none could wait forever.
            return (searchNowLocked(pressureBefore: before) ? waiters.count : 1, [])
        }
        Self.run(stalled)
        guard let search else { return false }
        if search > 0 { releaseIdle(count: search) }
        return true
    }

    /// A woken waiter's open failed otherwise than with `EMFILE`/`ENFILE`.
    func retryFailed() {
        let stalled = lock.withLock { () -> [Retry] in
            retrying -= 1
            return stalledLocked()
        }
        Self.run(stalled)
    }

    /// Runs the retries `forget` returned (with no lock held).
    static func run(_ retries: [Retry]) {
        for retry in retries { retry() }
    }

    /// No path channel's fd may close by itself: every waiting open is
    /// woken to try once more (each fails if its open fails again and this
    /// still holds).
    private func stalledLocked() -> [Retry] {
        guard !waiters.isEmpty, holders.isEmpty, closing == 0, retrying == 0 else { return [] }
        var woken: [Retry] = []
        while let waiter = waiters.popFirst() { woken.append(waiter) }
        retrying += woken.count
        updatePressureLocked()
        _invariantCheckLocked()
        return woken
    }

    private func readLimitLocked() {
        let limit = (try? Syscall.openFileLimit()).map { Int(clamping: $0) } ?? 1024
        cap = Swift.max(16, limit / 2)
        limitRead = true
    }

    /// Asks the idle holders, least recently used first, to let go of
    /// their fds until `count` did.
    private func releaseIdle(count: Int) {
        let candidates = lock.withLock { Array(holders.values) }.sorted { $0.lastUse < $1.lastUse }
        var released = 0
        for channel in candidates where released < count {
            if channel.releaseIfIdle() { released += 1 }
        }
    }

    /// Whether to search for idle holders now (see `eventsSinceSearch`).
    private func searchNowLocked(pressureBefore: Bool) -> Bool {
        eventsSinceSearch += 1
        guard !pressureBefore || eventsSinceSearch >= Swift.max(1, cap / 8) else { return false }
        eventsSinceSearch = 0
        return true
    }

    private func updatePressureLocked() {
        pressure.store(open > cap || !waiters.isEmpty, ordering: .relaxed)
    }

    @inline(__always)
    private func _invariantCheckLocked() {
        #if DEBUG
        precondition(open >= 0 && closing >= 0 && retrying >= 0,
                     "PathDescriptors: open \(open), closing \(closing), retrying \(retrying)")
        #endif
    }

    /// Fds path channels hold now (for tests).
    var openCount: Int { lock.withLock { open } }
    /// Opens waiting for a close (for tests).
    var waitingCount: Int { lock.withLock { waiters.count } }
    /// The cap now (for tests).
    var currentCap: Int { lock.withLock { cap } }
}
