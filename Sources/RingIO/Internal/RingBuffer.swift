/// A growable FIFO ring buffer: O(1) amortised append, O(1) removeFirst.
///
/// The library depends on swift-system only, so this small deque stands in
/// for swift-collections' `Deque` in the queues and the engine.
struct RingBuffer<Element> {
    private var storage: [Element?]
    private var head = 0
    private(set) var count = 0

    init(initialCapacity: Int = 16) {
        storage = Array(repeating: nil, count: Swift.max(initialCapacity, 2))
    }

    var isEmpty: Bool { count == 0 }

    mutating func append(_ element: Element) {
        if count == storage.count { grow() }
        var i = head + count
        if i >= storage.count { i -= storage.count }
        storage[i] = element
        count += 1
    }

    mutating func prepend(_ element: Element) {
        if count == storage.count { grow() }
        head = head == 0 ? storage.count - 1 : head - 1
        storage[head] = element
        count += 1
    }

    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let e = storage[head].take()
        head += 1
        if head == storage.count { head = 0 }
        count -= 1
        return e
    }

    var first: Element? { count > 0 ? storage[head] : nil }

    /// The first non-nil result of `transform` over the elements, in order.
    func firstMap<T>(_ transform: (Element) -> T?) -> T? {
        for i in 0..<count {
            var j = head + i
            if j >= storage.count { j -= storage.count }
            if let e = storage[j], let t = transform(e) { return t }
        }
        return nil
    }

    /// Removes every element matching `predicate`, keeping the others in order.
    mutating func removeAll(where predicate: (Element) -> Bool) -> [Element] {
        var kept = RingBuffer(initialCapacity: storage.count)
        var removed: [Element] = []
        while let e = popFirst() {
            if predicate(e) { removed.append(e) } else { kept.append(e) }
        }
        self = kept
        return removed
    }

    private mutating func grow() {
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
