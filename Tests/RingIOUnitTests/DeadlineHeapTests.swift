import Testing
@testable import RingIOBase

/// The one heap under the engine's timers, the fallback timer thread and
/// `asyncAfter`: earliest first, ties in sequence (arming) order.
@Suite("DeadlineHeap")
struct DeadlineHeapTests {
    /// A small deterministic generator (xorshift), so a failure repeats.
    struct Numbers {
        var state: UInt64
        mutating func next(below bound: Int64) -> Int64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return Int64(state % UInt64(bound))
        }
    }

    @Test("pushes and pops in any mix come out in (deadline, sequence) order, the heap ordered after each step")
    func ordersMixedPushesAndPops() {
        var numbers = Numbers(state: 0x9E37_79B9_7F4A_7C15)
        var heap = DeadlineHeap<Int>()
        var model: [(when: Int64, sequence: UInt64)] = []
        var sequence: UInt64 = 0
        for step in 0..<5_000 {
            if numbers.next(below: 3) != 0 || model.isEmpty {
                // Few distinct deadlines: many ties.
                let when = numbers.next(below: 50)
                sequence += 1
                heap.push(when: when, sequence: sequence, payload: step)
                model.append((when, sequence))
            } else {
                model.sort { $0.when != $1.when ? $0.when < $1.when : $0.sequence < $1.sequence }
                let expected = model.removeFirst()
                let popped = heap.popFirst()
                #expect(popped?.when == expected.when && popped?.sequence == expected.sequence, "step \(step)")
            }
            #expect(heap.count == model.count)
            if step % 97 == 0 { #expect(heap.isHeapOrdered, "step \(step)") }
        }
        #expect(heap.isHeapOrdered)
    }

    @Test("equal deadlines leave in sequence order; an empty heap pops nil")
    func tiesInSequenceOrder() {
        var heap = DeadlineHeap<String>()
        #expect(heap.popFirst() == nil)
        for (i, name) in ["a", "b", "c", "d"].enumerated().reversed() {
            heap.push(when: 7, sequence: UInt64(i), payload: name)
        }
        heap.push(when: 3, sequence: 99, payload: "first")
        var order: [String] = []
        while let element = heap.popFirst() { order.append(element.payload) }
        #expect(order == ["first", "a", "b", "c", "d"])
        #expect(heap.isEmpty && heap.first == nil)
    }

    @Test("removeAll(where:) drops what it picks and keeps the rest in order")
    func removeAllKeepsOrder() {
        var heap = DeadlineHeap<Int>()
        for i in 0..<1_000 { heap.push(when: Int64((i * 7919) % 1_000), sequence: UInt64(i), payload: i) }
        heap.removeAll { $0.payload % 3 == 0 }
        #expect(heap.count == 666)
        #expect(heap.isHeapOrdered)
        var previous: Int64 = -1
        while let element = heap.popFirst() {
            #expect(element.payload % 3 != 0)
            #expect(element.when >= previous)
            previous = element.when
        }
    }
}
