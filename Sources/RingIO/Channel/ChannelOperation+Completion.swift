#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
@_spi(Engine) import RingIOEngine

// Completions, water marks, the end of the I/O and the handler calls.
extension ChannelOperation {
    // MARK: - completions (on the engine's thread: short, never blocking)

    func completed(_ slot: Slot, _ res: Int32) {
        carryOut(lock.withLock { completedLocked(slot, res) })
    }

    /// With the lock held: a request of `slot` completed with `res`.
    private func completedLocked(_ slot: Slot, _ res: Int32) -> Settled {
        var requests: [IORequest] = []
        inFlight -= 1
        slot.request = nil
        let fd = entry!.fd
        if slot.prefill {
            if res >= 0 && !stopped && end == nil {
                requests.append(readModifyWriteLocked(slot, read: Int(res), fd: fd))
            } else {
                slot.prefill = false
                slot.error = res < 0 ? Errno(rawValue: -res) : .canceled
                slot.complete = true
            }
        } else if res > 0 {
            slot.done += Int(res)
            // Direct I/O continues only at an aligned offset: a read that
            // stopped elsewhere reached the end of file.
            let aligned = direct.map { slot.done % $0.offset == 0 } ?? true
            if slot.done < slot.size && !stopped && end == nil && (positional || direction == .write) && aligned {
                requests.append(makeRequestLocked(slot, fd: fd))  // continue a short read or write
            } else {
                if slot.done < slot.size && !aligned {
                    if direction == .read { slot.endOfFile = true } else { slot.error = .ioError }
                }
                slot.complete = true
            }
        } else if res == 0 {
            if direction == .read {
                slot.endOfFile = true
            } else {
                slot.error = .ioError  // a write that moved nothing would loop forever
            }
            slot.complete = true
        } else if (res == -EINTR || res == -EAGAIN) && !stopped && end == nil {
            if res == -EAGAIN {
                // A non-blocking fd: wait for readiness, then try again.
                let events = UInt32(direction == .read ? POLLIN : POLLOUT)
                inFlight += 1
                let poll = IORequest(.poll(fd: fd, events: events), owner: slot, mayBlock: true) { [self] pollRes in
                    polled(slot, pollRes)
                }
                slot.request = poll
                requests.append(poll)
            } else {
                requests.append(makeRequestLocked(slot, fd: fd))
            }
        } else {
            slot.error = Errno(rawValue: -res)
            slot.complete = true
        }
        return settleLocked(then: requests)
    }

    func polled(_ slot: Slot, _ res: Int32) {
        let settled = lock.withLock { () -> Settled in
            var requests: [IORequest] = []
            inFlight -= 1
            slot.request = nil
            if res < 0 && res != -EINTR || stopped || end != nil {
                slot.error = res < 0 && res != -EINTR ? Errno(rawValue: -res) : .canceled
                slot.complete = true
            } else {
                requests.append(makeRequestLocked(slot, fd: entry!.fd))
            }
            return settleLocked(then: requests)
        }
        carryOut(settled)
    }

    /// What a completion leaves to do once the lock is released.
    struct Settled {
        /// Run the handler calls here (inline operations).
        var runDeliveries: Bool
        var requests: [IORequest]
        /// The I/O is over.
        var finish: Bool
    }

    /// With the lock held, after a completion: takes the results in order,
    /// and says what to do once the lock is released: the requests to issue
    /// (`requests` and what the limits allow besides), the handler calls to
    /// run, whether the I/O is over.
    func settleLocked(then requests: [IORequest]) -> Settled {
        let schedule = advanceLocked()
        let requests = requests + makeRequestsLocked()
        return Settled(runDeliveries: schedule, requests: requests, finish: end != nil && inFlight == 0 && !ioDone)
    }

    /// Carries out what `settleLocked` returned (no lock held).
    func carryOut(_ settled: Settled) {
        if settled.runDeliveries { runInlineDeliveries() }
        submit(settled.requests)
        if settled.finish { finishIO() }
    }

    /// With the lock held: takes completed slots in file order, decides how
    /// the operation ends, and enqueues the deliveries the water marks call
    /// for. Returns whether the handler runner must be scheduled.
    func advanceLocked() -> Bool {
        while end == nil, let head = slots.first, head.complete {
            slots.removeFirst()
            // The slot's bytes that are the user's (all of them, but with
            // direct I/O at the edges of the range).
            let lower = Swift.max(head.start, ioHead)
            let upper = Swift.min(head.start + head.done, userEnd)
            if direction == .read, upper > lower {
                undelivered = undelivered.concat(head.buffer!.chunk(range: (lower - head.start)..<(upper - head.start)))
            }
            transferred += Swift.max(0, upper - lower)
            if !positional && direction == .read { issued = transferred }
            if let error = head.error {
                end = .failed(stopped && error == .canceled ? .canceled : error)
            } else if head.endOfFile {
                end = .endOfFile
            } else if head.done < head.size && direction == .read && stopped {
                end = .failed(.canceled)
            }
        }
        if end == nil {
            if transferred == length {
                end = .complete
            } else if cutAtLargestOffset && slots.isEmpty && issued >= ioLength {
                end = .endOfFile
            } else if options.endAfterFirstBytes && !positional && transferred > 0 {
                end = .complete
            } else if stopped && inFlight == 0 {
                end = .failed(.canceled)
            }
        }
        if end != nil {
            slots.removeAll()  // later slots: past the end; their results are ignored
            return false
        }
        return deliverByWaterMarksLocked(force: false)
    }

    /// With the lock held: the deliveries of the low-water rule (`force`: a
    /// strict interval tick, which delivers even less, even nothing).
    func deliverByWaterMarksLocked(force: Bool) -> Bool {
        let low = settings.effectiveLow(positional: positional)
        let high = settings.deliverySize(positional: positional)
        var schedule = false
        switch direction {
        case .read:
            while !undelivered.isEmpty && (undelivered.count >= low || force) {
                let n = Swift.min(high, undelivered.count)
                let piece = undelivered.subrange(0..<n)
                undelivered = undelivered.subrange(n..<undelivered.count)
                schedule = enqueueLocked(Delivery(done: false, data: piece, error: nil, bytes: n)) || schedule
            }
            if force && !schedule && deliveries.isEmpty {
                schedule = enqueueLocked(Delivery(done: false, data: .empty, error: nil, bytes: 0))
            }
        case .write:
            if transferred < length && (transferred - writeDeliveredAt >= low || (force && deliveries.isEmpty)) {
                writeDeliveredAt = transferred
                schedule = enqueueLocked(Delivery(done: false, data: data.subrange(transferred..<length),
                                                  error: nil, bytes: 0))
            }
        }
        return schedule
    }

    /// The interval timer: returns false once the operation is over.
    func tick() -> Bool {
        lock.lock()
        if ioDone || end != nil {
            lock.unlock()
            return false
        }
        let schedule = settings.strictInterval ? deliverByWaterMarksLocked(force: true) : deliverByWaterMarksLocked(force: false)
        lock.unlock()
        if schedule { runInlineDeliveries() }
        return true
    }

    /// The I/O is over: the final deliveries, the file position, the entry.
    func finishIO(ranOnEntry: Bool = true) {
        lock.lock()
        guard !ioDone, let end else {
            lock.unlock()
            return
        }
        ioDone = true
        var succeeded = false
        if case .complete = end { succeeded = true }
        let endPosition = fileBase + Int64(ioHead) + Int64(transferred)
        let restoreLength = succeeded ? self.restoreLength : nil
        lock.unlock()
        if let restoreLength, let entry {
            // A read-modify-write wrote a whole block past the old end of file.
            var st = stat()
            if fstat(entry.fd, &st) == 0 && Int64(st.st_size) > restoreLength {
                _ = ftruncate(entry.fd, off_t(restoreLength))
            }
        }
        // The position first: the last handler call may read it, or hand
        // the fd on (SEMANTICS.md, "Kinds").
        if isStream && positional && ranOnEntry && positionTaken, let entry {
            _ = lseek(entry.fd, off_t(endPosition), SEEK_SET)
        }
        if queueFinalDeliveries() { runInlineDeliveries() }
        // The last call is queued before the next operation may start, so
        // that on one serial queue the operations' handlers run in order.
        if ranOnEntry { entry?.operationFinishedIO(self) }
    }

    /// Queues the last handler calls; returns whether the caller must run
    /// them (inline operations), once it holds no lock. `deferRunner`: the
    /// caller also runs them (on `queue`) when the operation is not inline.
    func queueFinalDeliveries(deferRunner: Bool = false) -> Bool {
        lock.lock()
        let end = self.end!
        let high = settings.deliverySize(positional: positional)
        var schedule = false
        switch direction {
        case .read:
            var pieces: [DataChunk] = []
            while !undelivered.isEmpty {
                let n = Swift.min(high, undelivered.count)
                pieces.append(undelivered.subrange(0..<n))
                undelivered = undelivered.subrange(n..<undelivered.count)
            }
            switch end {
            case .complete:
                if pieces.isEmpty { pieces = [.empty] }
                for (i, piece) in pieces.enumerated() {
                    let last = i == pieces.count - 1
                    schedule = enqueueLocked(Delivery(done: last, data: piece, error: nil, bytes: piece.count)) || schedule
                }
            case .endOfFile, .failed:
                for piece in pieces {
                    schedule = enqueueLocked(Delivery(done: false, data: piece, error: nil, bytes: piece.count)) || schedule
                }
                if case .failed(let error) = end {
                    schedule = enqueueLocked(Delivery(done: true, data: nil, error: error, bytes: 0)) || schedule
                } else {
                    schedule = enqueueLocked(Delivery(done: true, data: .empty, error: nil, bytes: 0)) || schedule
                }
            }
        case .write:
            switch end {
            case .complete, .endOfFile:
                schedule = enqueueLocked(Delivery(done: true, data: nil, error: nil, bytes: 0), deferRunner: deferRunner)
            case .failed(let error):
                schedule = enqueueLocked(Delivery(done: true, data: data.subrange(transferred..<length), error: error,
                                                  bytes: 0), deferRunner: deferRunner)
            }
        }
        lock.unlock()
        return schedule
    }

    // MARK: - handler calls: on `queue`, one at a time, in order

    /// With the lock held: adds a delivery; true if the runner must be scheduled.
    ///
    /// The runner goes onto the queue here, with the lock held, so that it is
    /// queued before anything this delivery lets happen (the next operation
    /// of the fd starting and queuing its own runner). Inline operations run
    /// it on the caller's thread, after the lock is released.
    func enqueueLocked(_ delivery: Delivery, deferRunner: Bool = false) -> Bool {
        deliveries.append(delivery)
        queuedBytes += delivery.bytes
        if runnerActive { return false }
        runnerActive = true
        if options.inline || deferRunner { return true }
        queue.async { [self] in runDeliveries() }
        return false
    }

    /// Runs the deliveries of an inline operation (see `enqueueLocked`).
    func runInlineDeliveries() {
        runDeliveries()
    }

    /// The consumer took `bytes` of what was delivered (`manualCredit`):
    /// reading may go on.
    func release(_ bytes: Int) {
        let requests = lock.withLock { () -> [IORequest] in
            queuedBytes -= bytes
            handledBytes += bytes
            return makeRequestsLocked()
        }
        submit(requests)
    }

    /// Calls the handler for each queued delivery, one at a time, until none
    /// is left. It does not yield the queue in between: a later operation's
    /// runner, queued behind it, must not overtake this operation's calls.
    func runDeliveries() {
        while true {
            lock.lock()
            guard let delivery = deliveries.popFirst() else {
                runnerActive = false
                lock.unlock()
                return
            }
            lock.unlock()
            handler(delivery.done, delivery.data, delivery.error)
            lock.lock()
            if !options.manualCredit {
                queuedBytes -= delivery.bytes
                handledBytes += delivery.bytes
            }
            let requests = delivery.done ? [] : makeRequestsLocked()
            lock.unlock()
            submit(requests)
            if delivery.done {
                channel?.operationEnded(self)
                // Only an operation that reached an entry is counted there.
                entry?.operationHandlersReturned()
                return
            }
        }
    }
}
