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
// @unchecked: `state`, `waiters`, the list (`head`, `tail`, and each
// channel's `holderPrevious`/`holderNext`/`isHolder`) are read and written
// with `lock` held; `pressure` and `tailHint` are atomic.
final class PathDescriptors: @unchecked Sendable {
    typealias Retry = @Sendable () -> Void

    /// What an event leaves to do once no lock is held (`perform`).
    struct Work {
        /// Ask this many idle holders, least recently used first, to let go.
        var release = 0
        /// Waiting opens to try again.
        var retries: [Retry] = []
    }

    static let shared = PathDescriptors()

    private let lock = PlainLock()
    /// The counts, and what each event leaves to do.
    private var state = PathDescriptorState()
    /// Opens that failed with `EMFILE` or `ENFILE`: each tries again once a
    /// path channel's fd closes (`state.waiting` of them).
    private var waiters = RingBuffer<Retry>(initialCapacity: 4)
    /// The holders, least recently used first: an intrusive list through
    /// their `holderPrevious`/`holderNext` (a use moves one to the tail).
    private var head: ChannelCore?
    private var tail: ChannelCore?
    /// The tail's identity, read without the lock: a use of the channel
    /// that is already the most recently used one takes no lock.
    private let tailHint = Atomic<UInt>(0)
    /// `state.pressure`, read without the lock.
    let pressure = Atomic<Bool>(false)

    /// A path channel opened an fd (`holder`: it may let go of it; then
    /// it becomes the most recently used). `retried`: the open was a woken
    /// waiter's. `closing`: the channel was closed meanwhile, the fd
    /// closes once its handlers return. Called with the channel's lock
    /// held (the order is channel, then this): `perform` the result once
    /// it is released.
    func opened(holder: ChannelCore?, retried: Bool = false, closing closes: Bool = false) -> Work {
        lock.withLock {
            if !state.limitRead { state.setLimit(Self.readLimit()) }
            if let holder { appendLocked(holder) }
            return workLocked(state.opened(holds: holder != nil, retried: retried, closes: closes))
        }
    }

    /// A path channel's fd closed: an open waiting for one tries again.
    func closed() {
        perform(lock.withLock { workLocked(state.closed()) })
    }

    /// `channel` no longer has an fd it may let go of: it let go of it or
    /// closed (`closing`: its fd closes by itself, soon), or was pinned.
    /// Called with its lock held: `perform` the result once it is released.
    func forget(_ channel: ChannelCore, closing closes: Bool) -> Work {
        lock.withLock {
            let wasHolder = channel.isHolder
            if wasHolder { unlinkLocked(channel) }
            return workLocked(state.forget(wasHolder: wasHolder, closes: closes))
        }
    }

    /// A path channel is used: a holder becomes the most recently used.
    @inline(__always)
    func touch(_ channel: ChannelCore) {
        let id = UInt(bitPattern: ObjectIdentifier(channel))
        guard tailHint.load(ordering: .relaxed) != id else { return }
        lock.withLock {
            guard channel.isHolder, tail !== channel else { return }
            unlinkLocked(channel)
            appendLocked(channel)
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
        let (waits, work) = lock.withLock { () -> (Bool, Work) in
            state.setLimit(Self.readLimit())
            var failing = PathDescriptorState.Actions()
            guard let actions = state.waitForClose(retried: retried, failing: &failing) else {
                return (false, workLocked(failing))
            }
            waiters.append(retry)
            return (true, workLocked(actions))
        }
        perform(work)
        return waits
    }

    /// A woken waiter's open failed otherwise than with `EMFILE`/`ENFILE`.
    func retryFailed() {
        perform(lock.withLock { workLocked(state.retryFailed()) })
    }

    /// Carries out what an event left to do (with no channel's lock held).
    func perform(_ work: Work) {
        if work.release > 0 { releaseIdle(count: work.release) }
        for retry in work.retries { retry() }
    }

    /// The state's actions as work: the waiters to wake, taken off the queue.
    private func workLocked(_ actions: PathDescriptorState.Actions) -> Work {
        var work = Work(release: actions.release)
        for _ in 0..<actions.wake {
            if let waiter = waiters.popFirst() { work.retries.append(waiter) }
        }
        pressure.store(state.pressure, ordering: .relaxed)
        _invariantCheckLocked()
        return work
    }

    private static func readLimit() -> Int? {
        (try? Syscall.openFileLimit()).map { Int(clamping: $0) }
    }

    /// Asks the idle holders, least recently used first, to let go of
    /// their fds until `count` did or each was asked once. Each one asked
    /// moves to the tail (one that is busy was just used).
    private func releaseIdle(count: Int) {
        var released = 0
        var asked = 0
        let holders = lock.withLock { state.holders }
        while released < count && asked < holders {
            let batch = lock.withLock { () -> [ChannelCore] in
                var batch: [ChannelCore] = []
                while batch.count < Swift.min(count - released, holders - asked), let first = head {
                    unlinkLocked(first)
                    appendLocked(first)
                    batch.append(first)
                }
                return batch
            }
            if batch.isEmpty { return }
            asked += batch.count
            for channel in batch where channel.releaseIfIdle() { released += 1 }
        }
    }

    private func appendLocked(_ channel: ChannelCore) {
        channel.isHolder = true
        channel.holderPrevious = tail
        channel.holderNext = nil
        if let tail { tail.holderNext = channel } else { head = channel }
        tail = channel
        tailHint.store(UInt(bitPattern: ObjectIdentifier(channel)), ordering: .relaxed)
    }

    private func unlinkLocked(_ channel: ChannelCore) {
        let previous = channel.holderPrevious
        let next = channel.holderNext
        if let previous { previous.holderNext = next } else { head = next }
        if let next { next.holderPrevious = previous } else { tail = previous }
        channel.holderPrevious = nil
        channel.holderNext = nil
        channel.isHolder = false
        tailHint.store(tail.map { UInt(bitPattern: ObjectIdentifier($0)) } ?? 0, ordering: .relaxed)
    }

    @inline(__always)
    private func _invariantCheckLocked() {
        #if DEBUG
        state._invariantCheck()
        precondition(waiters.count == state.waiting,
                     "PathDescriptors: \(waiters.count) waiting opens, the state counts \(state.waiting)")
        precondition((head == nil) == (state.holders == 0), "PathDescriptors: the holder list and count disagree")
        #endif
    }

    /// Fds path channels hold now (for tests).
    var openCount: Int { lock.withLock { state.open } }
    /// Opens waiting for a close (for tests).
    var waitingCount: Int { lock.withLock { state.waiting } }
    /// The cap now (for tests).
    var currentCap: Int { lock.withLock { state.cap } }
    /// The holders, least recently used first (for tests).
    var holderCount: Int { lock.withLock { state.holders } }
}
