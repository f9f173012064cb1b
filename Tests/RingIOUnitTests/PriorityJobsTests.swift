import Testing
@testable import RingIOQueue

/// The pool's start rule alone, with no thread: which job starts next.
@Suite("PriorityJobs: the worker pool's start rule")
struct PriorityJobsTests {
    private static let background = IOQueue.Priority.background.rawValue
    private static let userInitiated = IOQueue.Priority.userInitiated.rawValue

    private func job(_ level: Int) -> PoolJob { .plain({}, level: level) }

    @Test(".background runs on at most its width; higher levels start beside it")
    func backgroundWidth() {
        var jobs = PriorityJobs(backgroundWidth: 1)
        for _ in 0..<3 { jobs.append(job(Self.background)) }
        let first = jobs.popFirst()
        #expect(first?.level == Self.background)
        #expect(jobs.backgroundFull && !jobs.hasStartable, "the width is taken: nothing else may start")
        #expect(jobs.popFirst() == nil)
        jobs.append(job(Self.userInitiated))
        #expect(jobs.hasStartable)
        #expect(jobs.popFirst()?.level == Self.userInitiated, "a higher level starts while .background is full")
        jobs.finished(level: Self.userInitiated)
        #expect(jobs.popFirst() == nil)
        jobs.finished(level: Self.background)
        #expect(jobs.popFirst()?.level == Self.background, "an end frees the width")
        jobs._invariantCheck()
    }

    @Test("widen lets one more .background job start; each end takes the extra back")
    func widen() {
        var jobs = PriorityJobs(backgroundWidth: 2)
        for _ in 0..<5 { jobs.append(job(Self.background)) }
        #expect(jobs.popFirst() != nil && jobs.popFirst() != nil)
        #expect(jobs.popFirst() == nil)
        jobs.widen()
        #expect(jobs.popFirst() != nil, "widened: a third starts")
        #expect(jobs.runningBackground == 3 && jobs.popFirst() == nil)
        jobs.finished(level: Self.background)
        #expect(jobs.extraBackgroundWidth == 0)
        #expect(jobs.popFirst() == nil, "back at the base width with two running")
        jobs.finished(level: Self.background)
        #expect(jobs.popFirst() != nil)
        jobs._invariantCheck()
    }

    @Test("progress counts .background starts and ends only")
    func progress() {
        var jobs = PriorityJobs(backgroundWidth: 1)
        jobs.append(job(Self.userInitiated))
        let start = jobs.backgroundProgress
        let high = jobs.popFirst()!
        jobs.finished(level: high.level)
        #expect(jobs.backgroundProgress == start)
        jobs.append(job(Self.background))
        let low = jobs.popFirst()!
        jobs.finished(level: low.level)
        #expect(jobs.backgroundProgress == start + 2)
    }

    @Test("aging: one start in eight goes to a waiting lower level, within its width")
    func aging() {
        var jobs = PriorityJobs(backgroundWidth: 1)
        for _ in 0..<40 { jobs.append(job(Self.userInitiated)) }
        for _ in 0..<4 { jobs.append(job(Self.background)) }
        var order: [Int] = []
        for _ in 0..<24 {
            guard let next = jobs.popFirst() else { break }
            order.append(next.level)
            // Every job ends before the next start: the width never binds.
            jobs.finished(level: next.level)
        }
        #expect(order.count == 24)
        #expect(order.filter { $0 == Self.background }.count == 3, "\(order)")
        #expect(order[7] == Self.background && order[15] == Self.background)
        // With the width taken, the aged start goes to the higher level.
        var held = PriorityJobs(backgroundWidth: 1)
        held.append(job(Self.background))
        let running = held.popFirst()
        #expect(running?.level == Self.background)
        for _ in 0..<16 { held.append(job(Self.userInitiated)) }
        held.append(job(Self.background))
        for _ in 0..<16 { #expect(held.popFirst()?.level == Self.userInitiated) }
        held._invariantCheck()
    }
}
