import Synchronization
import RingIOBase

extension IOQueue {
    /// Runs `work(0)`, `work(1)`, ..., `work(iterations - 1)` in parallel on
    /// the worker pool and the calling thread, and returns when every one has
    /// returned.
    ///
    /// The calling thread takes part, so a call made from inside another
    /// (nesting), or while every worker is busy, still finishes: the caller
    /// runs what no worker has taken. Iterations run on up to one thread per
    /// core; indices are handed out in small chunks (about 32 per thread),
    /// so tiny iterations do not fight over one counter.
    ///
    /// - Parameters:
    ///   - iterations: The number of calls; 0 or fewer returns at once.
    ///   - work: The body, given each index once.
    ///
    /// The corresponding libdispatch function is `dispatch_apply`.
    public static func concurrentPerform(iterations: Int, _ work: @Sendable (Int) -> Void) {
        guard iterations > 0 else { return }
        let width = Swift.min(iterations, WorkerPool.shared.baseThreads)
        if width == 1 {
            for i in 0..<iterations { work(i) }
            return
        }
        withoutActuallyEscaping(work) { escapable in
            let context = ApplyContext(iterations: iterations, width: width, work: escapable)
            let level = IOQueue.current?.level ?? Priority.default.rawValue
            let helpers = (1..<width).map { _ in PoolJob.plain({ context.run() }, level: level) }
            WorkerPool.shared.submit(contentsOf: helpers)
            context.run()
            context.waitForAll()
            // Helpers that start late find no index left and never touch it.
            context.release()
        }
    }
}

/// One `concurrentPerform` call: the next chunk to hand out, the iterations
/// done, and the caller's wait for the last one.
final class ApplyContext: @unchecked Sendable {
    // @unchecked: `work` is written at init and by `release()`, which runs
    // after every claimed chunk has finished (the `done` count, acquired,
    // says so); a thread reads it only after claiming a chunk below
    // `iterations`, so every read happens before `release()`. `finished` is
    // read and written with `lock` held.
    private nonisolated(unsafe) var work: (@Sendable (Int) -> Void)?
    private let iterations: Int
    private let chunk: Int
    private let next = Atomic<Int>(0)
    private let done = Atomic<Int>(0)
    private let lock = ConditionLock()
    private nonisolated(unsafe) var finished = false

    init(iterations: Int, width: Int, work: @escaping @Sendable (Int) -> Void) {
        self.iterations = iterations
        // About 32 chunks per thread: few claims for tiny iterations, and
        // chunks of one for a few heavy ones (64 on 2 cores: 1 each).
        self.chunk = Swift.max(1, iterations / (width * 32))
        self.work = work
    }

    /// Claims and runs chunks until none is left.
    func run() {
        while true {
            let start = next.wrappingAdd(chunk, ordering: .relaxed).oldValue
            guard start < iterations else { return }
            let end = Swift.min(start + chunk, iterations)
            do {
                // The body's reference ends here, before `done` says so.
                let body = work!
                for i in start..<end { body(i) }
            }
            if done.add(end - start, ordering: .acquiringAndReleasing).newValue == iterations {
                lock.withLock {
                    finished = true
                    lock.signal()
                }
            }
        }
    }

    /// Waits for every iteration (the caller's own are done already).
    func waitForAll() {
        if done.load(ordering: .acquiring) == iterations { return }
        lock.withLock {
            while !finished { lock.wait() }
        }
    }

    /// Drops the body before `concurrentPerform` returns.
    func release() { work = nil }
}
