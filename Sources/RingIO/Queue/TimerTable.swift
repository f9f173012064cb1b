import RingIOBase

/// The armed timers of a timer service: a heap of deadlines and the live
/// timers' fires by slot. The fallback service (`FallbackTimerService`) and
/// the engine's keep one each, under their own lock.
///
/// A token (``TimerToken/id``) names a slot in its low 32 bits and the
/// slot's generation in its high 32 bits; freeing a slot bumps its
/// generation, so a stale token names nothing. (A dictionary by id cost a
/// hash per arm, fire and cancel: a few percent of the CPU with 10,000
/// timers.) The heap holds plain entries (deadline, arming order, token):
/// sifting retains nothing. A cancel frees the slot at once and leaves its
/// heap entry to be skipped when it comes up; the heap is rebuilt without
/// the dead entries when they are over half of it.
///
/// A timer stays live from `arm` until `take`: the owner takes a one-shot's
/// fire when it pops it, and may keep a repeating one's (`moveFirst`
/// re-queues its entry with the same token).
@usableFromInline
package struct TimerTable<Fire> {
    // `@usableFromInline` and `@inlinable`, as `DeadlineHeap`: the engine's
    // service is in another module, and an unspecialized table would cost
    // witness-table calls per fire.
    @usableFromInline package private(set) var heap = DeadlineHeap<UInt64>()
    /// The fires of the live timers, by slot; nil: a free slot.
    @usableFromInline var fires: [Fire?] = []
    /// Each slot's generation (a token's high 32 bits).
    @usableFromInline var generations: [UInt32] = []
    @usableFromInline var freeSlots: [Int] = []
    /// Timers armed and not yet taken.
    @usableFromInline package private(set) var liveCount = 0
    /// Entries pushed so far: the next one's place among equal deadlines.
    @usableFromInline var sequence: UInt64 = 0

    @inlinable package init() {}

    /// Arms `fire` at `when` (nanoseconds of the owner's clock); returns its token.
    @inlinable package mutating func arm(_ fire: Fire, at when: Int64) -> UInt64 {
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            fires[slot] = fire
        } else {
            slot = fires.count
            fires.append(fire)
            generations.append(0)
        }
        liveCount += 1
        let id = UInt64(generations[slot]) << 32 | UInt64(slot)
        sequence &+= 1
        heap.push(when: when, sequence: sequence, payload: id)
        return id
    }

    /// The fire of live timer `id`, freeing its slot (its heap entry, if
    /// any, is dropped later); nil when it was taken already or `id` is stale.
    @inlinable @discardableResult
    package mutating func take(_ id: UInt64) -> Fire? {
        let slot = Int(truncatingIfNeeded: id & 0xFFFF_FFFF)
        guard slot < fires.count, generations[slot] == UInt32(truncatingIfNeeded: id >> 32),
              let fire = fires[slot] else { return nil }
        fires[slot] = nil
        generations[slot] &+= 1
        freeSlots.append(slot)
        liveCount -= 1
        return fire
    }

    /// Cancels timer `id`: `take`, then a rebuild of the heap when dead
    /// entries are over half of it. Returns whether the timer was live.
    @inlinable package mutating func cancel(_ id: UInt64) -> Bool {
        guard take(id) != nil else { return false }
        if heap.count > 64 && heap.count > 2 * liveCount {
            var rebuilt = heap
            heap = DeadlineHeap()
            rebuilt.removeAll { !isLive($0.payload) }
            heap = rebuilt
        }
        return true
    }

    /// Whether `id` names a live timer.
    @inlinable package func isLive(_ id: UInt64) -> Bool {
        let slot = Int(truncatingIfNeeded: id & 0xFFFF_FFFF)
        return slot < fires.count && generations[slot] == UInt32(truncatingIfNeeded: id >> 32) && fires[slot] != nil
    }

    /// The fire of live timer `id`, which stays live; nil when it was taken
    /// or `id` is stale.
    @inlinable package func fire(of id: UInt64) -> Fire? {
        let slot = Int(truncatingIfNeeded: id & 0xFFFF_FFFF)
        guard slot < fires.count, generations[slot] == UInt32(truncatingIfNeeded: id >> 32) else { return nil }
        return fires[slot]
    }

    /// The earliest live entry's token and deadline (dead entries on top
    /// are dropped); nil when none. (Not its fire: a copy retains it, and
    /// the caller that wants it takes or reads it once, `take`/`fire(of:)`.)
    @inlinable package mutating func first() -> (id: UInt64, when: Int64)? {
        while let top = heap.first {
            if isLive(top.payload) { return (top.payload, top.when) }
            heap.popFirst()
        }
        return nil
    }

    /// The earliest live entry if it is due by `now`.
    @inlinable package mutating func firstDue(by now: Int64) -> (id: UInt64, when: Int64)? {
        guard let top = first(), top.when <= now else { return nil }
        return top
    }

    /// Removes the earliest entry (the timer stays live until `take`).
    @inlinable package mutating func removeFirst() { heap.popFirst() }

    /// Queues live timer `id` again at `when` (its entry was removed).
    @inlinable package mutating func rearm(_ id: UInt64, at when: Int64) {
        guard isLive(id) else { return }
        sequence &+= 1
        heap.push(when: when, sequence: sequence, payload: id)
    }

    /// Moves the earliest entry to `when`, same token (a repeating timer's
    /// next fire): one sift, where a pop and a push cost two.
    @inlinable package mutating func moveFirst(to when: Int64) {
        sequence &+= 1
        heap.replaceFirst(when: when, sequence: sequence)
    }
}
