// Keeping a number of operations in flight, for any system: through
// completion handlers (`InFlightLoop`) or through tasks (`asyncInFlight`).
import BenchSupport
import Dispatch
import Synchronization

/// Runs `count` jobs, `depth` at a time: `issue(i, finished)` starts job `i`
/// and calls `finished` once, when it is done (with an error message if it
/// failed); the next job starts from that call.
final class InFlightLoop: Sendable {
    typealias Finished = @Sendable (_ error: String?) -> Void
    private let count: Int
    private let issue: @Sendable (Int, @escaping Finished) -> Void
    private let next = Atomic<Int>(0)
    private let completed = Atomic<Int>(0)
    private let completion = Completion()

    init(count: Int, issue: @escaping @Sendable (Int, @escaping Finished) -> Void) {
        self.count = count
        self.issue = issue
    }

    /// Runs every job; returns the seconds it took.
    func run(depth: Int, what: String, timeout: Double) throws -> Double {
        let start = now()
        for _ in 0..<min(depth, count) { startOne() }
        try completion.wait(what, timeout: timeout) {
            "\(completed.load(ordering: .relaxed)) of \(count) done, \(min(next.load(ordering: .relaxed), count)) started"
        }
        return seconds(since: start)
    }

    private func startOne() {
        let i = next.wrappingAdd(1, ordering: .relaxed).oldValue
        guard i < count else { return }
        issue(i) { [self] error in
            if let error {
                completion.finish("job \(i): \(error)")
            } else if completed.wrappingAdd(1, ordering: .relaxed).newValue == count {
                completion.finish()
            } else {
                startOne()
            }
        }
    }
}

/// Runs `count` jobs from `depth` tasks, each taking the next job when its
/// last one is done: `job(worker, i)`, `worker` in 0..<depth.
func inFlight(count: Int, depth: Int, _ job: @escaping @Sendable (_ worker: Int, _ index: Int) async throws -> Void) async throws {
    let next = Counter()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for worker in 0..<min(depth, count) {
            group.addTask {
                while true {
                    let i = next.take()
                    guard i < count else { return }
                    try await job(worker, i)
                }
            }
        }
        try await group.waitForAll()
    }
}

/// A shared counter for tasks to take numbers from.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    /// The next number, from 0.
    func take() -> Int { value.wrappingAdd(1, ordering: .relaxed).oldValue }
    /// How many numbers were taken.
    var taken: Int { value.load(ordering: .relaxed) }
}
