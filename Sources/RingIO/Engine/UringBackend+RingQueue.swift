import RingIOBase
import RingIOQueue

/// The ring queue (`IOEngine.queue`): work that runs on the ring thread.
///
/// ```
///  ring thread, one turn of its loop
///  ─────────────────────────────────
///  run the ring queues' drains ──▶ accept what they submitted ──▶ SQEs
///        ▲                                                        │
///        └── handlers enqueued on the ring queue ◀── reap ◀── io_uring_enter
/// ```
///
/// - A drain scheduled by the ring thread itself (a completion whose handler
///   queue is the ring queue, an item that enqueues another) goes on
///   `ringDrains`: no lock, no wake. From another thread it goes on
///   `drainInbox` under `lock`, with the same wake-up as a submitted request.
/// - A request submitted by the ring thread goes on `ringInbox`: no lock, no
///   eventfd write; it is accepted after the drains of this turn and enters
///   the kernel with the turn's `io_uring_enter`. (It is not accepted at
///   once: the submitter may hold its own lock, and accepting can complete
///   requests, whose handlers would then run under that lock.)
/// - Each turn runs the drains that were scheduled when it began; drains
///   scheduled while they run wait for the next turn, after a reap that
///   does not wait. So a queue that keeps re-enqueueing work cannot keep
///   completions from being reaped.
extension UringBackend: QueueRunner {
    private static let ringThreadMarker = ThreadLocalPointer()

    /// Whether the calling thread is this backend's ring thread.
    @inline(__always)
    var isRingThread: Bool {
        UringBackend.ringThreadMarker.value == Unmanaged.passUnretained(self).toOpaque()
    }

    func markRingThread() {
        UringBackend.ringThreadMarker.value = Unmanaged.passUnretained(self).toOpaque()
    }

    func unmarkRingThread() {
        UringBackend.ringThreadMarker.value = nil
    }

    func scheduleDrain(_ queue: IOQueue) -> Bool {
        if isRingThread {
            ringDrains.append(queue)
            return true
        }
        lock.lock()
        if stopped {
            lock.unlock()
            return false
        }
        drainInbox.append(queue)
        hasWork.store(true, ordering: .releasing)
        let wake = wakeLocked()
        lock.unlock()
        if wake { signalEventFD() }
        return true
    }

    /// Ring thread: a request submitted by the ring thread itself.
    @inline(__always)
    func submitFromRing(_ request: IORequest) {
        ringInbox.append(request)
    }

    /// Ring thread: accepts what the ring thread submitted before this call.
    /// What that submits in turn (a cancelled request's handler starting
    /// the next one, say) waits for the next turn, as requests from other
    /// threads do: one cascade cannot hold up everyone else's requests.
    func acceptRingInbox(stopping: Bool) {
        guard !ringInbox.isEmpty else { return }
        swap(&ringInbox, &ringAccepting)
        for request in ringAccepting { accept(request, stopping: stopping) }
        ringAccepting.removeAll(keepingCapacity: true)
    }

    /// Ring thread: runs the drains scheduled before this call, in order.
    func runRingDrains() {
        guard !ringDrains.isEmpty else { return }
        swap(&ringDrains, &ringDrainsRunning)
        for queue in ringDrainsRunning { queue.drainSerial() }
        ringDrainsRunning.removeAll(keepingCapacity: true)
    }
}
