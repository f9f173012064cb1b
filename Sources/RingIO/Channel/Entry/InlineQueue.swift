import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// A FIFO that keeps its first element inline and allocates a ring buffer
/// only from the second one on: most operations have one slot and one
/// handler call, and then the queue costs no allocation.
///
/// The inline element, when there is one, is the oldest: an element goes
/// inline only when the queue is empty.
///
/// `count` and `hasInline` are kept as plain fields: asking an optional
/// slot whether it is `nil` went through its type's value witnesses on the
/// ring thread's hot path.
struct InlineQueue<Element> {
    private var inline: Element?
    private var overflow: RingBuffer<Element>?
    private var hasInline = false
    private(set) var count = 0

    init() {}

    var isEmpty: Bool { count == 0 }
    var first: Element? { hasInline ? inline : overflow?.first }

    mutating func append(_ element: Element) {
        if count == 0 {
            inline = element
            hasInline = true
        } else if overflow == nil {
            var ring = RingBuffer<Element>(initialCapacity: 4)
            ring.append(element)
            overflow = ring
        } else {
            overflow!.append(element)
        }
        count += 1
    }

    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        count -= 1
        if hasInline {
            hasInline = false
            // Moved out, not copied and released.
            return inline.take()
        }
        return overflow!.popFirst()
    }

    /// `body` of the first element, without copying it; nil when empty.
    @inline(__always)
    func withFirst<R>(_ body: (Element) -> R) -> R? {
        if hasInline { return body(inline.unsafelyUnwrapped) }
        return overflow?.first.map(body)
    }

    mutating func removeAll() {
        inline = nil
        hasInline = false
        count = 0
        while overflow?.popFirst() != nil {}
    }

    /// The element `i` places from the front.
    subscript(offset i: Int) -> Element {
        get {
            if hasInline { return i == 0 ? inline.unsafelyUnwrapped : overflow![offset: i - 1] }
            return overflow![offset: i]
        }
        set {
            if hasInline {
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
        if hasInline {
            if i == 0 { return body(&inline!) }
            return body(&overflow![offset: i - 1])
        }
        return body(&overflow![offset: i])
    }
}
