#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
@_spi(Engine) import RingIOEngine
import RingIOBase
import RingIOData
import RingIOQueue

// Completions, the end of the I/O and the handler calls: each takes the lock
// for one transition of `state`, then carries out what it returned.
extension ChannelOperation {
    // MARK: - completions (on the engine's thread: short, never blocking)

    /// A slot's request completed (`IORequestTarget`): the tag says which
    /// slot, and whether it was the poll that waited for the fd.
    package func requestCompleted(_ request: IORequest, tag: Int, result res: Int32) {
        let id = tag >> 1
        lock.lock()
        state.updatePayload(of: id) { io in
            if io.request === request { io.request = nil }
        }
        let actions = tag & 1 == 0 ? state.completed(id, res, host: host) : state.polled(id, res, host: host)
        let requests = requestsLocked(actions)
        lock.unlock()
        carryOut(actions, requests)
    }

    /// Carries out what a transition returned (no lock held): the handler
    /// calls, the requests, the end of the I/O.
    func carryOut(_ actions: Progress.Actions, _ requests: Requests) {
        run(actions.runner)
        submit(requests)
        if actions.finish { finishIO() }
    }

    /// The interval timer: returns false once the operation is over.
    func tick() -> Bool {
        lock.lock()
        let runner = state.tick()
        lock.unlock()
        guard let runner else { return false }
        run(runner)
        return true
    }

    /// The I/O is over: the file position, then the final deliveries, then
    /// the entry (which may start the next operation).
    func finishIO(ranOnEntry: Bool = true) {
        lock.lock()
        guard let step = state.finishIO(ranOnEntry: ranOnEntry) else {
            lock.unlock()
            return
        }
        var final: (Progress.Runner, tellEntry: Bool)?
        if step == Progress.FinishStep() {
            // Nothing to do to the file: the last calls go in at once.
            final = state.queueFinalDeliveries(tellEntry: ranOnEntry)
        }
        lock.unlock()
        if final == nil {
            if let length = step.truncate, let entry {
                // A read-modify-write wrote a whole block past the old end of file.
                if let status = try? Syscall.fstat(entry.fd), status.size > length {
                    _ = try? Syscall.ftruncate(entry.fd, to: length)
                }
            }
            // The position first: the last handler call may read it, or
            // hand the fd on (docs/Semantics.md, "Kinds").
            if let position = step.position, let entry {
                _ = try? Syscall.lseek(entry.fd, position, SEEK_SET)
            }
            lock.lock()
            final = state.queueFinalDeliveries(tellEntry: ranOnEntry)
            lock.unlock()
        }
        let (runner, tellEntry) = final!
        // The last calls are queued before the next operation may start, so
        // that on one serial queue the operations' handlers run in order.
        // (No `runnerQueued` here: this caller tells the entry itself.)
        switch runner {
        case .none: break
        case .schedule: queue.async { [self] in runDeliveries() }
        case .runHere: runDeliveries()
        }
        if tellEntry { entry?.operationFinishedIO(self) }
    }

    // MARK: - handler calls: on `queue`, one at a time, in order

    /// Starts the handler runner as a transition asked.
    func run(_ runner: Progress.Runner) {
        switch runner {
        case .none:
            break
        case .runHere:
            runDeliveries()
        case .schedule:
            queue.async { [self] in runDeliveries() }
            lock.lock()
            let tellEntry = state.runnerQueued()
            lock.unlock()
            if tellEntry { entry?.operationFinishedIO(self) }
        }
    }

    /// Runs the deliveries of an inline operation (and of a coalesced write
    /// whose entry queued or runs them in order).
    func runInlineDeliveries() {
        runDeliveries()
    }

    /// The consumer took `bytes` of what was delivered (`manualCredit`):
    /// reading may go on.
    package func release(_ bytes: Int) {
        lock.lock()
        let fresh = state.release(bytes, host: host)
        let requests = requestsLocked(fresh)
        lock.unlock()
        submit(requests)
    }

    /// Calls the handler for each queued delivery, one at a time, until none
    /// is left. It does not yield the queue in between: a later operation's
    /// runner, queued behind it, must not overtake this operation's calls.
    func runDeliveries() {
        // The last handler call may drop the last reference held outside the
        // channel (an awaiting task resumed by it moves on at once, on
        // another thread or right here), and `operationEnded` the channel's:
        // keep the operation alive until this loop is done with it.
        let alive = Unmanaged.passRetained(self)
        defer { alive.release() }
        while true {
            lock.lock()
            let next = state.nextDelivery()
            lock.unlock()
            guard let delivery = next else { return }
            handler(delivery.done, delivery.data, delivery.error)
            lock.lock()
            let fresh = state.handlerReturned(delivery, host: host)
            let requests = requestsLocked(fresh)
            lock.unlock()
            submit(requests)
            if delivery.done {
                endReadAheadHolds()
                channel?.operationEnded(self)
                // Only an operation that reached an entry is counted there.
                entry?.operationHandlersReturned()
                channel?.operationLeftEntry()
                return
            }
        }
    }
}
