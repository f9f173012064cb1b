/// A binary min-heap of deadlines: the earliest `when` on top, equal ones in
/// `sequence` order (arming order). Shared by the three timer heaps: the
/// engine's ring timers, the fallback timer thread and `asyncAfter`'s
/// scheduler. Elements are plain data (a deadline in nanoseconds, a
/// sequence number and a small payload such as a slot or a token), so the
/// sifting retains and releases nothing.
@usableFromInline
package struct DeadlineHeap<Payload> {
    // `@usableFromInline` and `@inlinable` throughout, as `RingBuffer`: the
    // users are other modules, and an unspecialized generic heap would cost
    // a witness-table call per comparison.
    @usableFromInline
    package struct Element {
        /// The deadline, in nanoseconds of the owner's clock.
        @usableFromInline package let when: Int64
        /// Ties on `when` go in this order.
        @usableFromInline package let sequence: UInt64
        @usableFromInline package let payload: Payload

        @inlinable package init(when: Int64, sequence: UInt64, payload: Payload) {
            self.when = when
            self.sequence = sequence
            self.payload = payload
        }

        @inlinable @inline(__always)
        func precedes(_ other: Element) -> Bool {
            when < other.when || (when == other.when && sequence < other.sequence)
        }
    }

    @usableFromInline package private(set) var elements: [Element] = []

    @inlinable package init() {}

    @inlinable package var count: Int { elements.count }
    @inlinable package var isEmpty: Bool { elements.isEmpty }
    /// The earliest element.
    @inlinable package var first: Element? { elements.first }

    @inlinable package mutating func push(when: Int64, sequence: UInt64, payload: Payload) {
        elements.append(Element(when: when, sequence: sequence, payload: payload))
        var child = elements.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard elements[child].precedes(elements[parent]) else { break }
            elements.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the earliest element.
    @inlinable @discardableResult
    package mutating func popFirst() -> Element? {
        guard !elements.isEmpty else { return nil }
        let first = elements[0]
        let last = elements.removeLast()
        if !elements.isEmpty {
            elements[0] = last
            siftDown(0)
        }
        return first
    }

    /// Gives the earliest element a new `when` and `sequence` (same
    /// payload) and restores the order: one sift down, where `popFirst`
    /// and `push` cost two. Does nothing when empty.
    @inlinable package mutating func replaceFirst(when: Int64, sequence: UInt64) {
        guard !elements.isEmpty else { return }
        elements[0] = Element(when: when, sequence: sequence, payload: elements[0].payload)
        siftDown(0)
    }

    /// Drops the elements `shouldRemove` picks and restores the heap order
    /// (Floyd's build: O(n)).
    @inlinable package mutating func removeAll(where shouldRemove: (Element) -> Bool) {
        elements.removeAll(where: shouldRemove)
        var i = elements.count / 2
        while i > 0 {
            i -= 1
            siftDown(i)
        }
    }

    @inlinable mutating func siftDown(_ start: Int) {
        var parent = start
        let count = elements.count
        while true {
            let left = 2 * parent + 1
            guard left < count else { break }
            var best = left
            if left + 1 < count && elements[left + 1].precedes(elements[left]) { best = left + 1 }
            guard elements[best].precedes(elements[parent]) else { break }
            elements.swapAt(parent, best)
            parent = best
        }
    }

    /// Whether every parent precedes neither of its children (for tests).
    package var isHeapOrdered: Bool {
        elements.indices.dropFirst().allSatisfy { !elements[$0].precedes(elements[($0 - 1) / 2]) }
    }
}
