import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles

@Suite("InlineQueue: a FIFO with its first element inline")
struct InlineQueueTests {
    @Test("first in, first out across the inline element and the ring, with indexed updates")
    func fifo() {
        var queue = InlineQueue<Int>()
        #expect(queue.isEmpty && queue.first == nil && queue.popFirst() == nil)
        queue.append(1)
        queue.append(2)
        queue.append(3)
        #expect(queue.count == 3 && queue.first == 1)
        #expect((0..<3).map { queue[offset: $0] } == [1, 2, 3])
        queue[offset: 0] = 10
        queue[offset: 2] = 30
        #expect(queue.popFirst() == 10)
        // The inline place is free but the ring is not: a new element goes
        // behind the ring's, not in front of them.
        queue.append(4)
        #expect((0..<queue.count).map { queue[offset: $0] } == [2, 30, 4])
        queue[offset: 1] = 31
        var out: [Int] = []
        while let x = queue.popFirst() { out.append(x) }
        #expect(out == [2, 31, 4])
        #expect(queue.isEmpty)
        queue.append(5)
        queue.append(6)
        queue.removeAll()
        #expect(queue.isEmpty && queue.count == 0)
        queue.append(7)
        #expect(queue.first == 7 && queue.count == 1)
    }

    @Test("modify and withFirst reach the inline element and the ring's in place")
    func inPlace() {
        var queue = InlineQueue<[Int]>()
        #expect(queue.withFirst { $0.count } == nil)
        queue.append([1])
        queue.append([2])
        queue.modify(offset: 0) { $0.append(10) }
        queue.modify(offset: 1) { $0.append(20) }
        #expect(queue.withFirst { $0 } == [1, 10])
        #expect(queue.popFirst() == [1, 10])
        #expect(queue.withFirst { $0 } == [2, 20] && queue.count == 1)
        queue.modify(offset: 0) { $0 = [3] }
        #expect(queue.popFirst() == [3] && queue.isEmpty && queue.popFirst() == nil)
    }
}
