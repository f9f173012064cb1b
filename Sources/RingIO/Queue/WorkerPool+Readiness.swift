#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import SystemPackage
import RingIOBase

/// The fds of read and write sources, watched by an idle pool worker: one
/// epoll instance for the pool, and the worker the kernel wakes runs the
/// handlers the readiness enqueues itself.
///
/// ```
///  watch(fd) ──▶ epoll (one-shot entry on a private dup of fd)
///                    │ ready: the poll keeper (one idle worker, in epoll_wait) wakes
///  handler(events) on the keeper ──▶ enqueues the delivery ──▶ the keeper runs it
/// ```
///
/// A readiness then costs one thread wake-up, or none when the worker that
/// just ran a handler goes idle and finds the next readiness waiting. (A
/// multishot poll in the ring cost two: the ring thread left
/// `io_uring_enter`, then the worker it handed the delivery to left its
/// futex.) The keeper is woken for a job (an eventfd in the set) only when
/// no other worker sleeps. When no alarm keeper sleeps as it begins to
/// wait, it keeps the timers' alarms too (its wait ends at the earliest,
/// to the nanosecond with `epoll_pwait2`, else rounded up to a millisecond;
/// an earlier one wakes it). While no worker
/// waits on the fds (the keeper runs a job) the watchdog looks within
/// `keeperlessGraceNanoseconds`: a sleeping worker takes the role, and
/// the watchdog reads the set itself meanwhile (while every worker runs a
/// job, the handlers then wait for a worker in any case).
///
/// Each watch holds a dup of its fd: the entry is that file's, so a close
/// (or reuse) of the caller's number cannot leave a stale entry or remove
/// another watch's. A watch is one-shot: it reports one readiness, then
/// waits for `arm()`.
package final class PoolPoller: @unchecked Sendable {
    // @unchecked: `epfd` and `wakeFD` are immutable; `handlers` is `Locked`;
    // `watchCount` is atomic.
    static let wakeToken: UInt64 = 0
    let epfd: Int32
    let wakeFD: Int32
    private let handlers = Locked<(table: [UInt64: @Sendable (UInt32) -> Void], next: UInt64)>(([:], 1))
    /// Live watches (no keeper is needed without one).
    let watchCount = Atomic<Int>(0)
    /// Readinesses handled by a worker (the poll keeper) and by the
    /// watchdog, so far (for tests and diagnostics).
    package let byWorker = Atomic<Int>(0)
    package let byWatchdog = Atomic<Int>(0)

    init?() {
        guard let ep = try? Syscall.epollCreate() else { return nil }
        // O_CLOEXEC | O_NONBLOCK: EFD_CLOEXEC | EFD_NONBLOCK (the same bits).
        guard let ev = try? Syscall.eventfd(flags: O_CLOEXEC | O_NONBLOCK) else {
            Syscall.closeIgnoringErrors(ep)
            return nil
        }
        do throws(Errno) {
            try Syscall.epollControl(ep, .add, ev, events: Syscall.epollIn, data: Self.wakeToken)
        } catch {
            Syscall.closeIgnoringErrors(ev)
            Syscall.closeIgnoringErrors(ep)
            return nil
        }
        epfd = ep
        wakeFD = ev
    }

    func add(_ handler: @escaping @Sendable (UInt32) -> Void) -> UInt64 {
        handlers.withLock { h in
            let token = h.next
            h.next += 1
            h.table[token] = handler
            return token
        }
    }

    func remove(_ token: UInt64) {
        handlers.withLock { _ = $0.table.removeValue(forKey: token) }
    }

    /// Waits (`timeout` ns, -1: without end) and returns the handlers of what
    /// became ready, with their events; clears the wake eventfd.
    func wait(timeout: Int64) -> [(@Sendable (UInt32) -> Void, UInt32)] {
        var data = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        var events = (UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0))
        return withUnsafeMutableBytes(of: &data) { dataBytes in
            withUnsafeMutableBytes(of: &events) { eventBytes in
                let data = dataBytes.bindMemory(to: UInt64.self)
                let events = eventBytes.bindMemory(to: UInt32.self)
                let n = (try? Syscall.epollWait(epfd, data: data, events: events, timeoutNanoseconds: timeout)) ?? 0
                guard n > 0 else { return [] }
                var ready: [(@Sendable (UInt32) -> Void, UInt32)] = []
                var woken = false
                handlers.withLock { h in
                    for i in 0..<n {
                        if data[i] == Self.wakeToken {
                            woken = true
                        } else if let handler = h.table[data[i]] {  // (none: stopped meanwhile)
                            ready.append((handler, events[i]))
                        }
                    }
                }
                if woken { _ = try? Syscall.eventfdRead(wakeFD) }
                return ready
            }
        }
    }

    func wake() {
        _ = try? Syscall.eventfdWrite(wakeFD)
    }
}

/// One fd watched by the pool's poll keeper (`WorkerPool.watch`).
package final class PoolWatch: Sendable {
    private let poller: PoolPoller
    private let token: UInt64
    private let events: UInt32
    /// The private dup of the fd; -1 once stopped. Under its lock, so that
    /// `arm` never touches a number `stop` closed (it may be reused).
    private let fd: Locked<Int32>

    fileprivate init(poller: PoolPoller, token: UInt64, events: UInt32, fd: Int32) {
        self.poller = poller
        self.token = token
        self.events = events
        self.fd = Locked(fd)
    }

    /// Arms the watch for its next readiness (one report, then it waits
    /// for `arm` again). Does nothing once stopped.
    package func arm() {
        fd.withLock { fd in
            guard fd >= 0 else { return }
            try? Syscall.epollControl(poller.epfd, .modify, fd, events: events | Syscall.epollOneShot, data: token)
        }
    }

    /// Ends the watch; its handler may still run once if a readiness raced.
    package func stop() {
        let wasLive = fd.withLock { fd -> Bool in
            guard fd >= 0 else { return false }
            try? Syscall.epollControl(poller.epfd, .delete, fd, events: 0, data: 0)
            Syscall.closeIgnoringErrors(fd)
            fd = -1
            return true
        }
        if wasLive {
            poller.remove(token)
            poller.watchCount.subtract(1, ordering: .relaxed)
        }
    }
}

extension WorkerPool {
    /// Watches `fd` for `events` (`EPOLLIN`, `EPOLLOUT`): `handler` runs on
    /// a pool worker (or the watchdog) at its next readiness, with the ready
    /// events; then the watch waits for `arm()`. It must be short: it
    /// enqueues work.
    ///
    /// - Throws: `EBADF` (a closed fd), `EPERM` (a regular file or directory,
    ///   which epoll cannot watch), `EMFILE`, `ENOMEM`.
    package func watch(fd: Int32, events: UInt32,
                       handler: @escaping @Sendable (UInt32) -> Void) throws(Errno) -> PoolWatch {
        let poller = try readinessPoller()
        let dup = try Syscall.fcntl(fd, F_DUPFD_CLOEXEC, 0)
        let token = poller.add(handler)
        let watch = PoolWatch(poller: poller, token: token, events: events, fd: dup)
        poller.watchCount.add(1, ordering: .relaxed)
        do throws(Errno) {
            try Syscall.epollControl(poller.epfd, .add, dup, events: events | Syscall.epollOneShot, data: token)
        } catch {
            watch.stop()
            throw error
        }
        ensurePollKeeper()
        return watch
    }

    /// The pool's epoll instance, made on first use.
    private func readinessPoller() throws(Errno) -> PoolPoller {
        let poller = lock.withLock { () -> PoolPoller? in
            if self.poller == nil { self.poller = PoolPoller() }
            return self.poller
        }
        guard let poller else { throw .tooManyOpenFiles }
        return poller
    }

    /// A watch was added: makes sure a worker waits on the fds (a sleeper
    /// takes the role, or a new worker), and the watchdog looks meanwhile.
    private func ensurePollKeeper() {
        var spawn = false
        var spawnWatchdog = false
        lock.lock()
        if !pollWaiting {
            // A sleeper takes the role, or a new worker, or a worker going
            // round its loop; the watchdog looks until one does (the one
            // woken may be an extra worker, which does not).
            if idle > 0 {
                lock.signal()
            } else if threads < baseThreads && !spinning && firingWorkers == 0 {
                threads += 1
                spawn = true
            }
            spawnWatchdog = needWatchdogLocked()
        }
        lock.unlock()
        if spawn { startWorker(extra: false) }
        if spawnWatchdog { startWatchdog() }
    }

    /// The pool's epoll instance, if a watch made it (for tests and diagnostics).
    package var readinessPollerIfMade: PoolPoller? { lock.withLock { poller } }

    /// Under the lock: whether fds are watched and no worker waits on them.
    var readinessUnkept: Bool {
        !pollWaiting && (poller?.watchCount.load(ordering: .relaxed) ?? 0) > 0
    }

    /// Under the lock, on an idle (non-extra) worker: when fds are watched
    /// and no worker waits on them, waits on them until one is ready, a job
    /// comes or the earliest alarm is due; runs the ready fds' handlers
    /// (taking the jobs they enqueue next); returns true. Else false.
    func keepReadiness() -> Bool {
        guard readinessUnkept, let poller else { return false }
        let earliest = earliestAlarm.load(ordering: .relaxed)
        var timeout: Int64 = -1
        if earliest != .max && !keeperWaiting {
            let now = monotonicNanoseconds()
            timeout = earliest <= now ? 0 : Int64(clamping: earliest - now)
        }
        pollWaiting = true
        pollUntil = timeout < 0 ? .max : earliest
        lock.unlock()
        var ready = poller.wait(timeout: timeout)
        lock.lock()
        pollWaiting = false
        pollWoken = false
        runReadiness(&ready, poller: poller, byWorker: true)
        return true
    }

    /// Under the lock, on the watchdog: while no worker waits on the watched
    /// fds, looks at them without waiting and runs the handlers of the ready ones.
    func pollReadinessFromWatchdog() {
        guard readinessUnkept, let poller else { return }
        lock.unlock()
        var ready = poller.wait(timeout: 0)
        lock.lock()
        runReadiness(&ready, poller: poller, byWorker: false)
    }

    /// Under the lock: runs `ready`'s handlers with the lock released, and
    /// drops them before it takes the lock again: a handler may hold the
    /// last reference to something whose deinit takes this lock (a source
    /// stopped meanwhile, whose engine's timer service unschedules its
    /// alarm). On a worker, submits meanwhile wake no other worker: this
    /// one takes their jobs next.
    private func runReadiness(_ ready: inout [(@Sendable (UInt32) -> Void, UInt32)], poller: PoolPoller,
                              byWorker: Bool) {
        guard !ready.isEmpty else { return }
        if byWorker {
            poller.byWorker.add(ready.count, ordering: .relaxed)
        } else {
            poller.byWatchdog.add(ready.count, ordering: .relaxed)
        }
        if byWorker { firingWorkers += 1 }
        lock.unlock()
        DeliveryBatch().collect {
            for (handler, events) in ready { handler(events) }
        }
        ready.removeAll()
        lock.lock()
        if byWorker { firingWorkers -= 1 }
    }

    /// Under the lock: wakes the poll keeper (once until it returns).
    func wakePollKeeperLocked() {
        guard pollWaiting, !pollWoken, let poller else { return }
        pollWoken = true
        poller.wake()
    }
}
