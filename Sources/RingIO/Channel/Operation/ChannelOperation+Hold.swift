@_spi(Engine) import RingIOEngine
import RingIOData

// Reads pause while the chunks they handed out wait in write queues
// (`ReadAheadHold`): the read's side and the write's side.
extension ChannelOperation: ReadAheadHoldReader {
    /// A handler read (not awaited, not a chunk sequence, whose consumer
    /// releases bytes itself) gets a hold when it starts; its buffers carry it.
    var needsReadAheadHold: Bool {
        direction == .read && !options.inline && !options.manualCredit
    }

    /// The write bytes of this write that are chunks of reads with a hold,
    /// by hold (usually one).
    func readAheadHolds() -> [(ReadAheadHold, Int)] {
        var holds: [(ReadAheadHold, Int)] = []
        data.apply { region, _, bytes in
            if let buffer = region.soleStorage as? ReadBuffer, let hold = buffer.hold {
                if let i = holds.firstIndex(where: { $0.0 === hold }) {
                    holds[i].1 += bytes.count
                } else {
                    holds.append((hold, bytes.count))
                }
            }
            return true
        }
        return holds
    }

    /// The entry queued this write where no read runs ahead of it: its
    /// chunks count against their reads until it ends (the entry's lock is
    /// held; `heldFrom` is read again only by the write's last handler call).
    func takeReadAheadHolds(_ holds: [(ReadAheadHold, Int)]) {
        for (hold, bytes) in holds { hold.take(bytes) }
        heldFrom = holds
    }

    /// The operation's last handler call returned: a write gives its held
    /// bytes back, a read lets go of its hold.
    func endReadAheadHolds() {
        readAheadHold?.detach()
        let holds = heldFrom
        heldFrom = []
        for (hold, bytes) in holds { hold.give(bytes) }
    }

    package func readAheadHoldReleased() {
        lock.lock()
        let fresh = state.issue(host: host)
        let requests = requestsLocked(fresh)
        lock.unlock()
        submit(requests)
    }
}
