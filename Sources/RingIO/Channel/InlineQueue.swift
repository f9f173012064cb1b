import RingIOBase

/// A FIFO that keeps its first element inline and allocates a ring buffer
/// only from the second one on: most operations have one slot and one
/// handler call, and then the queue costs no allocation.
///
/// The inline element, when there is one, is the oldest: an element goes
/// inline only when the queue is empty.
struct InlineQueue<Element> {
    private var inline: Element?
    private var overflow: RingBuffer<Element>?

    init() {}

    var count: Int { (inline == nil ? 0 : 1) + (overflow?.count ?? 0) }
    var isEmpty: Bool { inline == nil && (overflow?.isEmpty ?? true) }
    var first: Element? { inline ?? overflow?.first }

    mutating func append(_ element: Element) {
        if inline == nil && (overflow?.isEmpty ?? true) {
            inline = element
        } else if overflow == nil {
            var ring = RingBuffer<Element>(initialCapacity: 4)
            ring.append(element)
            overflow = ring
        } else {
            overflow!.append(element)
        }
    }

    mutating func popFirst() -> Element? {
        // Moved out, not copied and released.
        if let element = inline.take() { return element }
        return overflow?.popFirst()
    }

    /// `body` of the first element, without copying it; nil when empty.
    @inline(__always)
    func withFirst<R>(_ body: (Element) -> R) -> R? {
        if inline != nil { return body(inline.unsafelyUnwrapped) }
        return overflow?.first.map(body)
    }

    mutating func removeAll() {
        inline = nil
        while overflow?.popFirst() != nil {}
    }

    /// The element `i` places from the front.
    subscript(offset i: Int) -> Element {
        get {
            if let inline { return i == 0 ? inline : overflow![offset: i - 1] }
            return overflow![offset: i]
        }
        set {
            if inline != nil {
                if i == 0 { inline = newValue } else { overflow![offset: i - 1] = newValue }
            } else {
                overflow![offset: i] = newValue
            }
        }
    }

    /// Changes the element `i` places from the front in place: no copy of
    /// it (and no retain and release of what it refers to). A method, not a
    /// `_modify` accessor: a coroutine's frame for an element this size is
    /// allocated on the heap.
    @inline(__always)
    mutating func modify<R>(offset i: Int, _ body: (inout Element) -> R) -> R {
        if inline != nil {
            if i == 0 { return body(&inline!) }
            return body(&overflow![offset: i - 1])
        }
        return body(&overflow![offset: i])
    }
}
