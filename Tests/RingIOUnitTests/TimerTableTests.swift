import Testing
@testable import RingIOBase
@testable import RingIOQueue

/// The slot-and-generation table under both timer services (the fallback
/// thread's and the engine's).
@Suite("TimerTable")
struct TimerTableTests {
    @Test("due entries come in deadline order; a taken or stale token names nothing; a freed slot is reused with a new generation")
    func tokensAndOrder() {
        var table = TimerTable<String>()
        _ = table.arm("late", at: 30)
        let early = table.arm("early", at: 10)
        let middle = table.arm("middle", at: 20)
        #expect(table.liveCount == 3)
        let notYet = table.firstDue(by: 9)
        let due = table.firstDue(by: 10)
        let dueFire = due.flatMap { table.fire(of: $0.id) }
        #expect(notYet == nil && due?.id == early && dueFire == "early")
        table.removeFirst()
        let taken = table.take(early), again = table.take(early)
        #expect(taken == "early" && again == nil)
        #expect(!table.isLive(early))
        // The freed slot is reused; the old token still names nothing.
        let reused = table.arm("reused", at: 25)
        #expect(reused & 0xFFFF_FFFF == early & 0xFFFF_FFFF && reused != early)
        let stale = table.take(early)
        #expect(stale == nil && table.isLive(reused))
        let cancelled = table.cancel(middle), cancelledAgain = table.cancel(middle)
        #expect(cancelled && !cancelledAgain)
        // The cancelled entry is skipped when it comes up.
        var order: [String] = []
        while let top = table.firstDue(by: 100) {
            table.removeFirst()
            order.append(table.take(top.id)!)
        }
        #expect(order == ["reused", "late"])
        let none = table.first()
        #expect(table.liveCount == 0 && none == nil)
        #expect(!table.isLive(UInt64(1) << 40 | 999))  // never armed
    }

    @Test("moveFirst re-queues a repeating timer with its token; cancels past half the heap rebuild it")
    func repeatsAndCompaction() {
        var table = TimerTable<Int>()
        let ticker = table.arm(-1, at: 5)
        var ids: [UInt64] = []
        for i in 0..<200 { ids.append(table.arm(i, at: 100 + Int64(i))) }
        let top = table.firstDue(by: 5)
        #expect(top?.id == ticker)
        table.moveFirst(to: 150)
        let next = table.first()
        #expect(table.isLive(ticker) && next?.when == 100)
        for id in ids.prefix(150) {
            let cancelled = table.cancel(id)
            #expect(cancelled)
        }
        // 51 live timers: the heap holds no more than twice that.
        #expect(table.liveCount == 51 && table.heap.count <= 102)
        #expect(table.heap.isHeapOrdered)
        var seen: [Int] = []
        while let top = table.firstDue(by: 1_000) {
            table.removeFirst()
            seen.append(table.fire(of: top.id)!)
        }
        #expect(seen == [-1] + Array(150..<200))
    }
}
