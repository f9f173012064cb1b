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
/// `ENFILE` while path channels hold fds of regular files waits for a path
/// channel's fd to close, then tries again.
// @unchecked: every `var` is read and written with `lock` held; `pressure`
// is atomic.
final class PathDescriptors: @unchecked Sendable {
    static let shared = PathDescriptors()

    private let lock = PlainLock()
    /// Fds opened by path channels and not closed yet.
    private var open = 0
    /// Those of them on regular files: each closes once its channel goes
    /// idle under pressure or closes (unless `fileDescriptor` pinned it).
    private var regularOpen = 0
    /// The path channels with an fd they may let go of.
    private var holders: [ObjectIdentifier: ChannelCore] = [:]
    /// Opens that failed with `EMFILE` or `ENFILE`: each tries again once a
    /// path channel's fd closes.
    private var waiters = RingBuffer<@Sendable () -> Void>(initialCapacity: 4)
    /// Opens and waits since the last search for idle channels. A search
    /// visits every holder, so it is made when the pressure begins and then
    /// once per `cap / 8` of them; meanwhile a channel that goes idle lets
    /// go of its fd by itself (`ChannelCore.releaseUnderPressure`).
    private var eventsSinceSearch = 0
    /// The most fds path channels should hold (half the soft limit, at least 16).
    private var cap = 512
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
    func opened(regular: Bool) {
        let limit = (try? Syscall.openFileLimit()).map { Int(clamping: $0) } ?? 1024
        let excess = lock.withLock { () -> Int in
            let before = pressure.load(ordering: .relaxed)
            open += 1
            if regular { regularOpen += 1 }
            cap = Swift.max(16, limit / 2)
            updatePressureLocked()
            guard open > cap, searchNowLocked(pressureBefore: before) else { return 0 }
            return open - cap * 3 / 4
        }
        if excess > 0 { releaseIdle(count: excess) }
    }

    /// A path channel's fd closed: an open waiting for one tries again.
    func closed(regular: Bool) {
        let waiter = lock.withLock { () -> (@Sendable () -> Void)? in
            open -= 1
            if regular { regularOpen -= 1 }
            let next = waiters.popFirst()
            updatePressureLocked()
            return next
        }
        waiter?()
    }

    /// `holder` no longer has an fd it may let go of (it let go of it,
    /// closed, or was pinned). Called with its lock held.
    func forget(_ holder: ChannelCore) {
        lock.withLock {
            _ = holders.removeValue(forKey: ObjectIdentifier(holder))
        }
    }

    /// An open failed with `EMFILE` or `ENFILE`: if path channels that may
    /// let go of them hold fds of regular files, `retry` runs once a path
    /// channel's fd closes (the idle ones are asked to let go of theirs
    /// now), and this returns true; false when none does (the open fails
    /// with the error, as it always did: a FIFO's fd or one the user has
    /// seen through `fileDescriptor` closes only when the user says so, and
    /// waiting for it could be waiting forever).
    func waitForClose(_ retry: @escaping @Sendable () -> Void) -> Bool {
        let search = lock.withLock { () -> Int? in
            guard regularOpen > 0, !holders.isEmpty else { return nil }
            let before = pressure.load(ordering: .relaxed)
            waiters.append(retry)
            updatePressureLocked()
            return searchNowLocked(pressureBefore: before) ? waiters.count : 0
        }
        guard let search else { return false }
        if search > 0 { releaseIdle(count: search) }
        return true
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

    /// Fds path channels hold now (for tests).
    var openCount: Int { lock.withLock { open } }
}
