#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import RingIOBase
import SystemPackage

/// The fallback backend: blocking system calls on a few worker threads.
///
/// Used where io_uring cannot be set up, or when asked for
/// (`RINGIO_BACKEND=threadpool`). It keeps the engine's contract: requests
/// from any thread, completions with the raw result (`-errno` on failure),
/// owners kept alive until completion, cancellation.
///
/// - Workers start on demand, `minimumThreads` stay, more are added while every
///   worker is busy, and the extra ones leave after `idleNanoseconds` without work.
/// - Requests that may block indefinitely (a read or write marked `mayBlock`, a
///   poll, an open that may wait for a FIFO's other end) wait in a queue of their
///   own and get capacity of their own (`maximumBlockingThreads` workers): however
///   many of them are blocked, a regular-file request still gets one of the
///   `maximumThreads` workers for file I/O at once.
/// - A read or write marked `mayBlock` (a pipe, socket or tty) waits in
///   `poll(2)` on its fd and on the worker's cancel eventfd, so a cancel
///   interrupts it at once; a regular-file request runs to completion (as a
///   regular-file read in io_uring's io-wq does).
final class ThreadPoolBackend: EngineBackend, @unchecked Sendable {
    // @unchecked: every `var` here, and the `engineState`/`worker` fields of
    // the requests it holds, are touched only with `lock` held.

    static let minimumThreads = 4
    /// Workers for requests that do not block indefinitely (regular files).
    static let maximumThreads = 64
    /// Workers for requests that may block indefinitely (pipes, sockets, FIFO opens).
    static let maximumBlockingThreads = 256
    static let idleNanoseconds: UInt64 = 10_000_000_000

    // @unchecked: `cancelFD` is immutable; `cancelSignalled` is guarded by
    // the backend's lock.
    final class Worker: @unchecked Sendable {
        let cancelFD: Int32
        var cancelSignalled = false
        init(cancelFD: Int32) { self.cancelFD = cancelFD }
        deinit { Syscall.closeIgnoringErrors(cancelFD) }
    }

    private let lock = ConditionLock()
    /// Requests that complete by themselves (regular-file I/O and the like).
    private var queue = TicketQueue<IORequest>()
    /// Requests that may wait indefinitely for another process (see `isBlocking`).
    private var blockingQueue = TicketQueue<IORequest>()
    private var threads = 0
    private var idle = 0
    /// Idle workers signalled and not yet awake: each is spoken for by one
    /// request. (Counting them keeps a second request from relying on the
    /// same wake-up: that worker may take the first, a pipe read, and block.)
    private var wakeups = 0
    /// Workers running a blocking request now.
    private var blockedWorkers = 0
    private var stopping = false
    /// The one thread that waits for every `.pollMultishot` watch.
    let readiness = ReadinessLoop()

    init() {}

    /// The number of worker threads alive now (for tests).
    var threadCount: Int { lock.withLock { threads } }

    func submit(_ request: IORequest) {
        var completeNow: [(IORequest, Int32)] = []
        var spawn = false
        lock.withLock {
            enqueueLocked(request, completeNow: &completeNow, spawn: &spawn)
        }
        for (r, res) in completeNow { r.complete(res) }
        if spawn { startWorker() }
    }

    func submit(contentsOf requests: [IORequest]) {
        var completeNow: [(IORequest, Int32)] = []
        var spawn = false
        var spawnCount = 0
        lock.withLock {
            for r in requests {
                enqueueLocked(r, completeNow: &completeNow, spawn: &spawn)
                if spawn { spawnCount += 1; spawn = false }
            }
        }
        for (r, res) in completeNow { r.complete(res) }
        for _ in 0..<spawnCount { startWorker() }
    }

    private func enqueueLocked(_ request: IORequest, completeNow: inout [(IORequest, Int32)], spawn: inout Bool) {
        if stopping {
            request.engineState = .done
            completeNow.append((request, -ECANCELED))
            return
        }
        if request.isMultishotPoll {
            let error = readiness.add(request)
            if error != 0 {
                request.engineState = .done
                completeNow.append((request, -error))
            }
            return
        }
        if case .cancel(let target) = request.operation {
            request.engineState = .done
            if target.isMultishotPoll {
                if readiness.remove(target) {
                    target.engineState = .done
                    completeNow.append((target, -ECANCELED))
                    completeNow.append((request, 0))
                } else {
                    completeNow.append((request, -ENOENT))
                }
                return
            }
            switch target.engineState {
            case .queued:
                // With its whole chain, if it is part of one; O(1) per request.
                let removed = Self.isBlocking(target.chainHead ?? target)
                    ? blockingQueue.removeQueued(target) : queue.removeQueued(target)
                for r in removed {
                    r.engineState = .done
                    completeNow.append((r, -ECANCELED))
                }
                completeNow.append((request, 0))
            case .inFlight:
                if target.mayBlock || target.isPoll || target.isTimeout, let worker = target.worker as? Worker, !worker.cancelSignalled {
                    worker.cancelSignalled = true
                    _ = try? Syscall.eventfdWrite(worker.cancelFD)
                    completeNow.append((request, 0))
                } else {
                    completeNow.append((request, -EALREADY))
                }
            case .new, .done:
                completeNow.append((request, -ENOENT))
            }
            return
        }
        request.engineState = .queued
        // A chain goes where its head goes (its requests stay together).
        let blocking = Self.isBlocking(request.chainHead ?? request)
        if blocking {
            request.backlogTicket = blockingQueue.append(request)
        } else {
            request.backlogTicket = queue.append(request)
        }
        if idle > wakeups {
            wakeups += 1
            lock.signal()
        } else if blocking ? blockedWorkers < Self.maximumBlockingThreads
                           : threads - blockedWorkers < Self.maximumThreads {
            // Every worker is busy (perhaps blocked on a pipe): add one.
            threads += 1
            spawn = true
        }
    }

    /// Whether `request` may wait indefinitely for something outside this
    /// process: a read or write on a pipe, socket or tty, a poll, or an open
    /// (of a FIFO: it waits for the other end).
    static func isBlocking(_ request: IORequest) -> Bool {
        if request.mayBlock || request.isPoll || request.isTimeout { return true }
        switch request.operation {
        case .openat: return true
        // A chain's open waits only without O_NONBLOCK (readFile's never does).
        case .openChained(_, _, let flags, _, _): return flags & O_NONBLOCK == 0
        default: return false
        }
    }

    /// The next request a worker may run: file I/O first; a blocking request
    /// while fewer than `maximumBlockingThreads` workers are blocked. Under the lock.
    private func takeNext() -> (IORequest, blocking: Bool)? {
        if let r = queue.popFirst() { return (r, false) }
        if blockedWorkers < Self.maximumBlockingThreads, let r = blockingQueue.popFirst() {
            blockedWorkers += 1
            return (r, true)
        }
        return nil
    }

    private func startWorker() {
        let efd: Int32
        do throws(Errno) { efd = try Syscall.eventfd(flags: Int32(EFD_CLOEXEC | EFD_NONBLOCK)) } catch {
            workerFailedToStart(error: error.rawValue)
            return
        }
        let worker = Worker(cancelFD: efd)
        let rc = spawnThread(name: "ringio-pool", { [self] in workerLoop(worker) })
        if rc != 0 { workerFailedToStart(error: rc) }
    }

    /// A worker could not start (no fd for its eventfd: EMFILE; no thread:
    /// EAGAIN). With no other worker alive, nothing would ever run the queued
    /// requests: fail them with the error instead of leaving them waiting.
    private func workerFailedToStart(error: Int32) {
        let orphans = lock.withLock { () -> [IORequest] in
            threads -= 1
            guard threads == 0 else { return [] }
            var out: [IORequest] = []
            while let r = queue.popFirst() ?? blockingQueue.popFirst() {
                r.engineState = .done
                out.append(r)
            }
            return out
        }
        for r in orphans { r.complete(-error) }
    }

    private func workerLoop(_ worker: Worker) {
        while runNext(on: worker) {}
    }

    /// Runs one queued request, waiting for one if need be; false when the
    /// worker is to leave. The request is released when this returns, with
    /// the lock not held: it may hold the last reference to the engine, whose
    /// deinit calls `shutdown`, which takes the lock.
    private func runNext(on worker: Worker) -> Bool {
        lock.lock()
        while true {
            if let (first, blocking) = takeNext() {
                // A linked chain is taken whole (its requests are queued
                // together) and run in order; a failure cancels the rest.
                var chain = [first]
                for _ in 1..<first.chainLength {
                    if let next = blocking ? blockingQueue.popFirst() : queue.popFirst() { chain.append(next) }
                }
                var broken = false
                for request in chain {
                    if broken {
                        request.engineState = .done
                        lock.unlock()
                        request.complete(-ECANCELED)
                        lock.lock()
                        continue
                    }
                    request.engineState = .inFlight
                    request.worker = worker
                    lock.unlock()
                    let res = perform(request.operation, mayBlock: request.mayBlock, cancelFD: worker.cancelFD)
                    lock.lock()
                    request.engineState = .done
                    request.worker = nil
                    if worker.cancelSignalled {
                        _ = try? Syscall.eventfdRead(worker.cancelFD)
                        worker.cancelSignalled = false
                    }
                    if request.linkNext && !request.hardLinkNext && !request.linkSucceeds(res) { broken = true }
                    lock.unlock()
                    request.complete(res)
                    lock.lock()
                }
                if blocking { blockedWorkers -= 1 }
                lock.unlock()
                return true
            }
            if stopping {
                threads -= 1
                lock.unlock()
                return false
            }
            idle += 1
            let deadline = monotonicNanoseconds() + Self.idleNanoseconds
            let signalled = lock.wait(untilNanoseconds: deadline)
            idle -= 1
            // This worker was the one signalled (or, rarely, another was and
            // will find the request taken); never more reserved than idle.
            if signalled && wakeups > 0 { wakeups -= 1 }
            wakeups = Swift.min(wakeups, idle)
            if !signalled && queue.isEmpty && blockingQueue.isEmpty && threads > Self.minimumThreads {
                threads -= 1
                lock.unlock()
                return false
            }
        }
    }

    func shutdown() {
        readiness.shutdown()
        let cancelled = lock.withLock { () -> [IORequest] in
            stopping = true
            var out: [IORequest] = []
            while let r = queue.popFirst() ?? blockingQueue.popFirst() {
                r.engineState = .done
                out.append(r)
            }
            lock.broadcast()
            return out
        }
        for r in cancelled { r.complete(-ECANCELED) }
    }

    // MARK: - the system calls

    /// Runs one request with blocking system calls; returns `res` as io_uring would.
    func perform(_ operation: IORequest.Operation, mayBlock: Bool, cancelFD: Int32) -> Int32 {
        switch operation {
        case .nop:
            return 0
        case .read(let fd, let buffer, let offset):
            return transfer(fd: fd, events: Int16(POLLIN), mayBlock: mayBlock, cancelFD: cancelFD) { () throws(Errno) in
                offset < 0 ? try Syscall.read(fd, into: buffer) : try Syscall.pread(fd, into: buffer, at: offset)
            }
        case .readv(let fd, let iovecs, let count, let offset):
            return transfer(fd: fd, events: Int16(POLLIN), mayBlock: mayBlock, cancelFD: cancelFD) { () throws(Errno) in
                try Syscall.preadv(fd, iovecs, count: count, at: offset)
            }
        case .write(let fd, let buffer, let offset):
            if mayBlock && offset < 0 {
                return transfer(fd: fd, events: Int16(POLLOUT), mayBlock: true, cancelFD: cancelFD) { () throws(Errno) in
                    try Self.writeWithoutBlocking(fd: fd, buffer.baseAddress, buffer.count)
                }
            }
            return transfer(fd: fd, events: Int16(POLLOUT), mayBlock: mayBlock, cancelFD: cancelFD) { () throws(Errno) in
                offset < 0 ? try Syscall.write(fd, from: buffer) : try Syscall.pwrite(fd, from: buffer, at: offset)
            }
        case .writev(let fd, let iovecs, let count, let offset):
            if mayBlock && offset < 0 {
                // One region at a time: a short write is continued by the caller.
                let first = iovecs[0]
                return transfer(fd: fd, events: Int16(POLLOUT), mayBlock: true, cancelFD: cancelFD) { () throws(Errno) in
                    try Self.writeWithoutBlocking(fd: fd, first.iov_base, first.iov_len)
                }
            }
            return transfer(fd: fd, events: Int16(POLLOUT), mayBlock: mayBlock, cancelFD: cancelFD) { () throws(Errno) in
                try Syscall.pwritev(fd, iovecs, count: count, at: offset)
            }
        case .openat(let directory, let path, let flags, let mode):
            return Syscall.negatedErrno { () throws(Errno) in try Syscall.openat(directory, path, flags: flags, mode: mode_t(mode)) }
        case .statx(let directory, let path, let flags, let mask, let buffer):
            return Syscall.negatedErrno { () throws(Errno) in
                try Syscall.statx(directory, path, flags: flags, mask: mask, into: buffer)
                return 0
            }
        case .close(let fd):
            // Never retried: the fd is gone whatever it returned.
            return Syscall.negatedErrno { () throws(Errno) in
                try Syscall.close(fd)
                return 0
            }
        case .fsync(let fd, let dataOnly):
            return Syscall.negatedErrno { () throws(Errno) in
                try Syscall.fsync(fd, dataOnly: dataOnly)
                return 0
            }
        case .poll(let fd, let events):
            var fds = [pollfd(fd: fd, events: Int16(truncatingIfNeeded: events), revents: 0),
                       pollfd(fd: cancelFD, events: Int16(POLLIN), revents: 0)]
            do throws(Errno) {
                try fds.withUnsafeMutableBufferPointer { (fds) throws(Errno) in _ = try Syscall.poll(fds) }
            } catch {
                return -error.rawValue
            }
            if fds[1].revents != 0 { return -ECANCELED }
            return Int32(fds[0].revents)
        case .pollMultishot:
            fatalError("unreachable: watches go to the readiness loop")
        case .timeout(let deadline):
            return Self.waitUntil(deadline.pointee, cancelFD: cancelFD)
        case .renameat(let oldDirectory, let oldPath, let newDirectory, let newPath, let flags):
            return Syscall.negatedErrno { () throws(Errno) in
                try Syscall.renameat2(oldDirectory, oldPath, newDirectory, newPath, flags: flags)
                return 0
            }
        case .unlinkat(let directory, let path, let flags):
            return Syscall.negatedErrno { () throws(Errno) in
                try Syscall.unlinkat(directory, path, flags: flags)
                return 0
            }
        case .splice(let input, let inputOffset, let output, let outputOffset, let length):
            return Syscall.negatedErrno { () throws(Errno) in
                try Syscall.splice(from: input, at: inputOffset < 0 ? nil : inputOffset,
                                   to: output, at: outputOffset < 0 ? nil : outputOffset, length: length)
            }
        case .openChained(let directory, let path, let flags, let mode, let file):
            do throws(Errno) {
                file.fd = try Syscall.openat(directory, path, flags: flags | O_CLOEXEC, mode: mode_t(mode))
                return 0
            } catch {
                return -error.rawValue
            }
        case .readChained(let file, let buffer, let offset):
            guard file.fd >= 0 else { return -EBADF }
            // Once, as io_uring does on an O_NONBLOCK fd: EAGAIN is a result
            // (and a pipe's ESPIPE, where io_uring would read).
            return Syscall.negatedErrno { () throws(Errno) in try Syscall.pread(file.fd, into: buffer, at: offset) }
        case .installChained(let file):
            guard file.fd >= 0 else { return -EBADF }
            return Syscall.negatedErrno { () throws(Errno) in try Syscall.fcntl(file.fd, F_DUPFD_CLOEXEC, 0) }
        case .closeChained(let file):
            guard file.fd >= 0 else { return -EBADF }
            defer { file.fd = -1 }
            return Syscall.negatedErrno { () throws(Errno) in
                try Syscall.close(file.fd)
                return 0
            }
        case .cancel:
            return -EINVAL
        }
    }

    /// A write to a pipe, socket or tty that cannot block once `poll` said
    /// the fd is writable, so that a cancel is never stuck behind a blocking
    /// write: a socket gets `send(MSG_DONTWAIT | MSG_NOSIGNAL)`; a pipe or FIFO
    /// at most `PIPE_BUF` bytes, which a writable pipe always takes whole; a
    /// character device (a tty, /dev/null) the whole buffer in one `write`.
    static func writeWithoutBlocking(fd: Int32, _ base: UnsafeRawPointer?, _ count: Int) throws(Errno) -> Int {
        let flags = Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL)
        let pipeBuffer = Swift.min(count, Int(PIPE_BUF))
        if let status = try? Syscall.fstat(fd) {
            switch status.type {
            case .socket: return try Syscall.send(fd, base, count: count, flags: flags)
            case .fifo: return try Syscall.write(fd, from: UnsafeRawBufferPointer(start: base, count: pipeBuffer))
            default: return try Syscall.write(fd, from: UnsafeRawBufferPointer(start: base, count: count))
            }
        }
        do {
            return try Syscall.send(fd, base, count: count, flags: flags)
        } catch .notSocket {
            return try Syscall.write(fd, from: UnsafeRawBufferPointer(start: base, count: pipeBuffer))
        }
    }

    /// A read or write; when it may block, first waits in poll with the cancel fd.
    private func transfer(fd: Int32, events: Int16, mayBlock: Bool, cancelFD: Int32,
                          _ call: () throws(Errno) -> Int) -> Int32 {
        var needPoll = mayBlock
        while true {
            if needPoll {
                var fds = [pollfd(fd: fd, events: events, revents: 0), pollfd(fd: cancelFD, events: Int16(POLLIN), revents: 0)]
                do throws(Errno) {
                    try fds.withUnsafeMutableBufferPointer { (fds) throws(Errno) in _ = try Syscall.poll(fds) }
                } catch {
                    return -error.rawValue
                }
                if fds[1].revents != 0 { return -ECANCELED }
                // POLLHUP/POLLERR/POLLNVAL: let the call itself report it.
            }
            do throws(Errno) {
                return Int32(clamping: try call())
            } catch .wouldBlock {
                // A non-blocking fd: wait for readiness, as io_uring's internal poll does.
                needPoll = true
            } catch {
                return -error.rawValue
            }
        }
    }

    /// `.timeout` on a worker: waits on the cancel eventfd until `deadline`
    /// (`CLOCK_BOOTTIME`, the clock the engine reports in `timeoutClock`);
    /// `-ETIME` when it passes, `-ECANCELED` when cancelled first.
    static func waitUntil(_ deadline: __kernel_timespec, cancelFD: Int32) -> Int32 {
        let target = Int64(deadline.tv_sec) * 1_000_000_000 + Int64(deadline.tv_nsec)
        while true {
            var now = timespec()
            clock_gettime(CLOCK_BOOTTIME, &now)
            let left = target - (Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec))
            if left <= 0 { return -ETIME }
            let rc = cliburing_wait_readable(cancelFD, left)
            if rc > 0 { return -ECANCELED }
            if rc < 0 && rc != -EINTR { return rc }
        }
    }
}
