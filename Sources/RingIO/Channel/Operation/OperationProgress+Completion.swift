#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

// Completions, file order, water marks and the interval.
extension OperationProgress {
    /// A request of slot `id` completed with `res` (bytes, or a negated errno).
    mutating func completed(_ id: Int, _ res: Int32, host: some OperationProgressHost<Payload>) -> Actions {
        defer { _invariantCheck() }
        inFlight -= 1
        // A slot no longer open lay past the end: its result is ignored.
        guard let i = index(of: id) else { return settle(again: nil, host: host) }
        var again: Again?
        var shortBlock: (start: Int, size: Int, read: Int)?
        let going = !stopped && end == nil
        let alignment = direct?.offset
        let (positional, direction) = (positional, direction)
        // The slot in place (a copy would retain and release what it holds);
        // what the rest of the progress learns is applied after.
        slots.modify(offset: i) { slot in
            if slot.prefill {
                if res >= 0 && going {
                    slot.prefill = false
                    shortBlock = (slot.start, slot.size, Int(res))
                    again = .readModifyWrite(id, read: Int(res))
                } else {
                    slot.prefill = false
                    slot.error = res < 0 ? Errno(rawValue: -res) : .canceled
                    slot.complete = true
                }
            } else if res > 0 {
                slot.done += Int(res)
                // Direct I/O continues only at an aligned offset: a read that
                // stopped elsewhere reached the end of file.
                let aligned = alignment.map { slot.done % $0 == 0 } ?? true
                if slot.done < slot.size && going && (positional || direction == .write) && aligned {
                    again = .rest(id)  // continue a short read or write
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
            } else if (res == -EINTR || res == -EAGAIN) && going {
                // EAGAIN: a non-blocking fd; wait for readiness, then try again.
                again = res == -EAGAIN ? .poll(id, forReading: direction == .read) : .rest(id)
            } else {
                slot.error = Errno(rawValue: -res)
                slot.complete = true
            }
        }
        if let block = shortBlock { noteShortBlock(start: block.start, size: block.size, read: block.read) }
        if again != nil { inFlight += 1 }
        return settle(again: again, host: host)
    }

    /// The poll of slot `id` (after `EAGAIN`) completed with `res`.
    mutating func polled(_ id: Int, _ res: Int32, host: some OperationProgressHost<Payload>) -> Actions {
        defer { _invariantCheck() }
        inFlight -= 1
        guard let i = index(of: id) else { return settle(again: nil, host: host) }
        if res < 0 && res != -EINTR || stopped || end != nil {
            slots[offset: i].error = res < 0 && res != -EINTR ? Errno(rawValue: -res) : .canceled
            slots[offset: i].complete = true
            return settle(again: nil, host: host)
        }
        inFlight += 1
        return settle(again: .rest(id), host: host)
    }

    /// After a completion: takes the results in order, and says what to do:
    /// the handler calls to run, the requests to issue (`again` and what
    /// the limits allow besides), whether the I/O is over.
    private mutating func settle(again: Again?, host: some OperationProgressHost<Payload>) -> Actions {
        let runner = advance()
        let fresh = issue(host: host)
        return Actions(runner: runner, again: again, fresh: fresh, finish: end != nil && inFlight == 0 && !ioDone)
    }

    /// Takes completed slots in file order, decides how the operation ends,
    /// and queues the deliveries the water marks call for.
    mutating func advance() -> Runner {
        while end == nil, slots.withFirst({ $0.complete }) == true, let head = slots.popFirst() {
            // The slot's bytes that are the user's (all of them, but with
            // direct I/O at the edges of the range).
            let lower = Swift.max(head.start, ioHead)
            let upper = Swift.min(head.start + head.done, userEnd)
            if direction == .read, upper > lower {
                undelivered = undelivered.concat(head.payload.chunk(range: (lower - head.start)..<(upper - head.start)))
            }
            transferred += Swift.max(0, upper - lower)
            if !positional && direction == .read { issued = transferred }
            if let error = head.error {
                conclude(.failed(stopped && error == .canceled ? .canceled : error))
            } else if head.endOfFile {
                conclude(.endOfFile)
            } else if head.done < head.size && direction == .read && stopped {
                conclude(.failed(.canceled))
            }
        }
        if end == nil {
            if transferred == length {
                conclude(.complete)
            } else if cutAtLargestOffset && slots.isEmpty && issued >= ioLength {
                conclude(.endOfFile)
            } else if options.endAfterFirstBytes && !positional && transferred > 0 {
                conclude(.complete)
            } else if stopped && inFlight == 0 {
                conclude(.failed(.canceled))
            }
        }
        if end != nil {
            // Later slots: past the end; their results are ignored.
            slots.removeAll()
            return .none
        }
        return deliverByWaterMarks(force: false)
    }

    /// The deliveries of the low-water rule (`force`: a strict interval
    /// tick, which delivers even less, even nothing).
    private mutating func deliverByWaterMarks(force: Bool) -> Runner {
        let low = settings.effectiveLow(positional: positional)
        let high = settings.deliverySize(positional: positional)
        var runner = Runner.none
        switch direction {
        case .read:
            while !undelivered.isEmpty && (undelivered.count >= low || force) {
                let n = Swift.min(high, undelivered.count)
                let piece = undelivered.subrange(0..<n)
                undelivered = undelivered.subrange(n..<undelivered.count)
                runner = runner.or(enqueue(Delivery(done: false, data: piece, error: nil, bytes: n)))
            }
            if force && runner == .none && deliveries.isEmpty {
                runner = enqueue(Delivery(done: false, data: .empty, error: nil, bytes: 0))
            }
        case .write:
            if transferred < length && (transferred - writeDeliveredAt >= low || (force && deliveries.isEmpty)) {
                writeDeliveredAt = transferred
                runner = enqueue(Delivery(done: false, data: data.subrange(transferred..<length), error: nil, bytes: 0))
            }
        }
        return runner
    }

    /// An interval tick: `nil` once the operation is over (the timer stops);
    /// a strict one delivers what is buffered, even nothing, a non-strict
    /// one only what reaches the low-water mark.
    mutating func tick() -> Runner? {
        defer { _invariantCheck() }
        if ioDone || end != nil { return nil }
        return deliverByWaterMarks(force: settings.strictInterval)
    }
}

extension OperationProgress.Runner {
    /// Either action (a transition queues one runner at most).
    func or(_ other: Self) -> Self { self == .none ? other : self }
}
