/// A growable FIFO ring buffer: O(1) amortised append, O(1) removeFirst.
///
/// The library depends on swift-system only, so this small deque stands in
/// for swift-collections' `Deque` in the queues and the engine.
@usableFromInline
package struct RingBuffer<Element> {
    // `@usableFromInline` and `@inlinable` throughout: the queues, the
    // engine and the channels are other modules, and a generic FIFO that is
    // not specialized where it is used would cost a witness-table call per
    // element.
    @usableFromInline var storage: [Element?]
    @usableFromInline var head = 0
    @usableFromInline package internal(set) var count = 0

    @inlinable package init(initialCapacity: Int = 16) {
        storage = Array(repeating: nil, count: Swift.max(initialCapacity, 2))
    }

    @inlinable package var isEmpty: Bool { count == 0 }

    @inlinable package mutating func append(_ element: Element) {
        if count == storage.count { grow() }
        var i = head + count
        if i >= storage.count { i -= storage.count }
        storage[i] = element
        count += 1
    }

    @inlinable package mutating func prepend(_ element: Element) {
        if count == storage.count { grow() }
        head = head == 0 ? storage.count - 1 : head - 1
        storage[head] = element
        count += 1
    }

    @inlinable package mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let e = storage[head].take()
        head += 1
        if head == storage.count { head = 0 }
        count -= 1
        return e
    }

    @inlinable package var first: Element? { count > 0 ? storage[head] : nil }

    /// The first non-nil result of `transform` over the elements, in order.
    @inlinable package func firstMap<T>(_ transform: (Element) -> T?) -> T? {
        for i in 0..<count {
            var j = head + i
            if j >= storage.count { j -= storage.count }
            if let e = storage[j], let t = transform(e) { return t }
        }
        return nil
    }

    /// Removes every element matching `predicate`, keeping the others in order.
    @inlinable package mutating func removeAll(where predicate: (Element) -> Bool) -> [Element] {
        var kept = RingBuffer(initialCapacity: storage.count)
        var removed: [Element] = []
        while let e = popFirst() {
            if predicate(e) { removed.append(e) } else { kept.append(e) }
        }
        self = kept
        return removed
    }

    @inlinable mutating func grow() {
        var new: [Element?] = Array(repeating: nil, count: storage.count * 2)
        for i in 0..<count {
            var j = head + i
            if j >= storage.count { j -= storage.count }
            new[i] = storage[j].take()
        }
        storage = new
        head = 0
    }
}

extension RingBuffer {
    /// The element `i` places after the first.
    @inlinable package subscript(offset i: Int) -> Element {
        get {
            var j = head + i
            if j >= storage.count { j -= storage.count }
            return storage[j]!
        }
        set {
            var j = head + i
            if j >= storage.count { j -= storage.count }
            storage[j] = newValue
        }
    }
}

/// A FIFO whose elements can also be removed from anywhere in O(1), by the
/// ticket `append` returned (the engines' backlogs: cancelling one of 40,000
/// queued requests must not rebuild the other 39,999). A removed element is
/// released at once; its slot is skipped when it reaches the front.
@usableFromInline
package struct TicketQueue<Element> {
    @usableFromInline var slots = RingBuffer<Element?>(initialCapacity: 64)
    /// Tickets of the slots already popped from the front.
    @usableFromInline var popped = 0
    /// Live elements (removed ones not counted).
    @usableFromInline package internal(set) var count = 0

    @inlinable package init() {}

    @inlinable package var isEmpty: Bool { count == 0 }

    /// Appends `element`; returns its ticket.
    @inlinable package mutating func append(_ element: Element) -> Int {
        let ticket = popped + slots.count
        slots.append(element)
        count += 1
        return ticket
    }

    @inlinable package var first: Element? { slots.first ?? nil }

    @inlinable package mutating func popFirst() -> Element? {
        guard let slot = slots.popFirst() else { return nil }
        popped += 1
        count -= 1
        let element = slot
        trimFront()
        return element
    }

    /// Removes the element with `ticket`; nil when it is no longer queued.
    @discardableResult
    @inlinable package mutating func remove(ticket: Int) -> Element? {
        let index = ticket - popped
        guard index >= 0 && index < slots.count, let element = slots[offset: index] else { return nil }
        slots[offset: index] = nil
        count -= 1
        trimFront()
        return element
    }

    /// Keeps a live element (or nothing) at the front.
    @inlinable mutating func trimFront() {
        while slots.count > 0, slots.first! == nil {
            _ = slots.popFirst()
            popped += 1
        }
    }
}
