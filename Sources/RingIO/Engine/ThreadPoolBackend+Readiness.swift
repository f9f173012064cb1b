#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import RingIOBase
import SystemPackage

/// The thread-pool backend's watches (`.pollMultishot`): one thread,
/// started on first use, waits in `poll(2)` on every watched fd at once, so
/// a thousand read sources cost one thread, not a thousand blocked workers.
///
/// ```
///  any thread               "ringio-sources"
///  ──────────               ────────────────
///  add(r) ──▶ watches ──▶ poll(watched fds + wake eventfd)
///  remove(r) ─┘  (locked)        │ ready
///                                ▼
///                   r.complete(revents), the watch ends
/// ```
///
/// A watch ends at its first readiness (its final completion carries the
/// ready events), as a one-shot poll does on a kernel without multishot
/// polls; the caller submits a new one when it wants more. So the loop
/// never spins on an fd that stays readable while its handler runs.
final class ReadinessLoop: @unchecked Sendable {
    // @unchecked: `watches`, `started` and `stopping` are touched only with
    // `lock` held; `wakeFD` is immutable after init.
    private let lock = ConditionLock()
    private var watches: [ObjectIdentifier: IORequest] = [:]
    private var started = false
    private var stopping = false
    private let wakeFD: Int32
    /// The loop thread's id, once it runs (signals are forwarded to it).
    let threadID = PublishedThreadID()

    init() {
        wakeFD = (try? Syscall.eventfd(flags: Int32(EFD_CLOEXEC | EFD_NONBLOCK))) ?? -1
    }

    deinit {
        if wakeFD >= 0 { Syscall.closeIgnoringErrors(wakeFD) }
    }

    /// Starts watching for `request` (a `.pollMultishot`); it completes at
    /// the fd's first readiness, or with `-ECANCELED` from `remove`.
    /// - Returns: false when the loop cannot run (no eventfd, no thread, or
    ///   stopped): the caller completes the request with the error.
    func add(_ request: IORequest) -> Int32 {
        guard wakeFD >= 0 else { return EMFILE }
        let start = lock.withLock { () -> Bool? in
            if stopping { return nil }
            request.engineState = .inFlight
            watches[ObjectIdentifier(request)] = request
            if started { return false }
            started = true
            return true
        }
        guard let start else { return ECANCELED }
        if start {
            let rc = spawnThread(name: "ringio-sources") { [self] in run() }
            if rc != 0 {
                lock.withLock {
                    started = false
                    watches[ObjectIdentifier(request)] = nil
                }
                return rc
            }
        } else {
            wake()
        }
        return 0
    }

    /// Stops watching for `request`; true when it was watched (the caller
    /// then completes it with `-ECANCELED`), false when it already ended.
    func remove(_ request: IORequest) -> Bool {
        let removed = lock.withLock { watches.removeValue(forKey: ObjectIdentifier(request)) != nil }
        if removed { wake() }
        return removed
    }

    /// Ends every watch (`-ECANCELED`) and the thread.
    func shutdown() {
        let all = lock.withLock { () -> [IORequest] in
            stopping = true
            defer { watches = [:] }
            return Array(watches.values)
        }
        wake()
        for r in all {
            r.engineState = .done
            r.complete(-ECANCELED)
        }
    }

    private func wake() {
        _ = try? Syscall.eventfdWrite(wakeFD)
    }

    private func run() {
        threadID.publish(cliburing_gettid())
        var fds: [pollfd] = []
        var requests: [IORequest] = []
        while true {
            fds.removeAll(keepingCapacity: true)
            requests.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0))
            let stop = lock.withLock { () -> Bool in
                for r in watches.values {
                    guard case .pollMultishot(let fd, let events) = r.operation else { continue }
                    fds.append(pollfd(fd: fd, events: Int16(truncatingIfNeeded: events), revents: 0))
                    requests.append(r)
                }
                return stopping
            }
            if stop { return }
            var failure: Errno?
            do throws(Errno) {
                _ = try fds.withUnsafeMutableBufferPointer { (fds) throws(Errno) in try Syscall.poll(fds) }
            } catch {
                failure = error
            }
            if let failure {
                // EINTR is retried by the seam; EAGAIN: the kernel was short of memory for a moment.
                if failure == .resourceTemporarilyUnavailable { continue }
                let e = failure.rawValue
                // EINVAL: more fds than RLIMIT_NOFILE allows in one poll;
                // ENOMEM: end every watch with the error rather than spin.
                let all = lock.withLock { () -> [IORequest] in
                    defer { watches = [:] }
                    return Array(watches.values)
                }
                for r in all {
                    r.engineState = .done
                    r.complete(-e)
                }
                continue
            }
            if fds[0].revents != 0 {
                _ = try? Syscall.eventfdRead(wakeFD)
            }
            var ready: [(IORequest, Int32)] = []
            lock.withLock {
                for i in 1..<fds.count where fds[i].revents != 0 {
                    let r = requests[i - 1]
                    // Removed meanwhile (cancelled): its canceller completes it.
                    guard watches.removeValue(forKey: ObjectIdentifier(r)) != nil else { continue }
                    r.engineState = .done
                    // POLLNVAL: the fd was closed under the watch; io_uring
                    // keeps its own reference to the file and would not see
                    // the close, so report it as an error that ends the watch.
                    ready.append((r, fds[i].revents & Int16(POLLNVAL) != 0 ? -EBADF : Int32(fds[i].revents)))
                }
            }
            for (r, res) in ready { r.complete(res) }
        }
    }
}
