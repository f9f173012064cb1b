import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine
/// What may start after a scheduler transition, in order. Nearly every
/// transition releases at most one item (a random read starting, the next
/// stream operation of a lane), so the first is kept inline and an array is
/// allocated only from the second one on: a 4 KiB random read's enqueue
/// then allocates nothing here (it was one `[Item]` per read).
struct ReadyItems<Item>: Sequence, ExpressibleByArrayLiteral {
    /// The only item, while there is exactly one.
    private var one: Item?
    /// Every item, in order, once there are two or more (`one` is then nil).
    private var more: [Item] = []

    init() {}

    init(arrayLiteral elements: Item...) {
        for element in elements { append(element) }
    }

    var isEmpty: Bool { one == nil && more.isEmpty }

    var count: Int { one == nil ? more.count : 1 }

    mutating func append(_ item: Item) {
        if let first = one {
            one = nil
            more = [first, item]
        } else if more.isEmpty {
            one = item
        } else {
            more.append(item)
        }
    }

    mutating func append(contentsOf other: ReadyItems) {
        for item in other { append(item) }
    }

    static func += (lhs: inout ReadyItems, rhs: ReadyItems) {
        lhs.append(contentsOf: rhs)
    }

    struct Iterator: IteratorProtocol {
        fileprivate var one: Item?
        fileprivate var more: IndexingIterator<[Item]>

        mutating func next() -> Item? {
            if let item = one {
                one = nil
                return item
            }
            return more.next()
        }
    }

    func makeIterator() -> Iterator {
        Iterator(one: one, more: more.makeIterator())
    }
}
