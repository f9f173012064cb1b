import RingIOBase

/// The worker pool's waiting jobs, one FIFO per priority level, and the
/// rule for which starts next.
///
/// A free worker starts the oldest job of the highest level that has one,
/// except every `agingPeriod`-th start made while lower levels wait, which
/// goes to a lower level that has work (round robin over them): so `.background` work keeps at least 1/8 of
/// the starts while higher levels flood the pool, and a ready item starts
/// within a second as long as the flood's jobs are shorter than about
/// 1 s / 8 × the number of workers (a CPU-bound flood of 1 ms jobs on two
/// workers: a background job waits about 4 ms). With one level in use (every
/// queue `.default`, the common case) a pop is one FIFO's pop after a scan
/// of a bit mask.
///
/// `.background` jobs run on at most `backgroundWidth` workers at once (one
/// less than the pool's base threads, at least one), as libdispatch narrows
/// its background root queue: a `.background` flood of long jobs leaves a
/// worker free, so a higher level's job starts at once instead of after the
/// end of a flood job (there is no preemption). A job that blocks its
/// worker (a semaphore that another `.background` job signals) must not
/// deadlock the level: when `.background` jobs wait at the width and none
/// has started or ended for a while, the pool's watchdog calls `widen()`;
/// each end of a `.background` job takes one extra back (so a flood of jobs
/// longer than that while gets one worker more, not the whole pool).
struct PriorityJobs {
    /// One start in `agingPeriod` goes to a lower level with work.
    static let agingPeriod = 8
    /// `IOQueue.Priority.background.rawValue`.
    static let backgroundLevel = 0
    private var levels: [RingBuffer<PoolJob>] =
        (0..<IOQueue.Priority.allCases.count).map { _ in RingBuffer<PoolJob>(initialCapacity: 64) }
    /// Jobs waiting, all levels.
    private(set) var count = 0
    /// Bit `l` set: level `l` has jobs (the highest is found without a scan).
    private var nonEmpty: UInt32 = 0
    /// Starts left until the next aging start.
    private var untilAging = PriorityJobs.agingPeriod
    /// The next lower level the aging start looks at first.
    private var agingCursor = 0
    /// The most `.background` jobs running at once, without `widen()`.
    let backgroundWidth: Int
    /// Width added by `widen()` (a blocked `.background` job).
    private(set) var extraBackgroundWidth = 0
    /// `.background` jobs popped and not yet `finished`.
    private(set) var runningBackground = 0
    /// Bumped at each start and end of a `.background` job: the watchdog
    /// compares it to see whether the level moves.
    private(set) var backgroundProgress: UInt64 = 0

    /// - Parameter backgroundWidth: The most `.background` jobs at once (at least 1).
    init(backgroundWidth: Int) {
        precondition(backgroundWidth >= 1)
        self.backgroundWidth = backgroundWidth
    }

    var isEmpty: Bool { count == 0 }

    /// `.background` jobs waiting.
    var waitingBackground: Int { levels[Self.backgroundLevel].count }

    /// `.background` may not start another job now.
    var backgroundFull: Bool { runningBackground >= backgroundWidth + extraBackgroundWidth }

    /// A job waits that `popFirst()` would return.
    var hasStartable: Bool { count > (backgroundFull ? waitingBackground : 0) }

    @inline(__always)
    mutating func append(_ job: PoolJob) {
        let level = job.level
        levels[level].append(job)
        nonEmpty |= 1 << UInt32(level)
        count += 1
    }

    /// The next job to start, and its level (give it back to `finished`);
    /// nil when nothing may start.
    @inline(__always)
    mutating func popFirst() -> (job: PoolJob, level: Int)? {
        var ready = nonEmpty
        if ready & 1 != 0 && backgroundFull { ready &= ~1 }
        guard ready != 0 else { return nil }
        let high = 31 - ready.leadingZeroBitCount
        var level = high
        let lower = ready & ((1 << UInt32(high)) - 1)
        if lower != 0 {
            // Only when lower levels wait: count the starts they miss.
            untilAging -= 1
            if untilAging == 0 {
                untilAging = Self.agingPeriod
                for k in 0..<high {
                    let candidate = (agingCursor + k) % high
                    if lower & (1 << UInt32(candidate)) != 0 {
                        level = candidate
                        agingCursor = candidate + 1
                        break
                    }
                }
            }
        }
        count -= 1
        let job = levels[level].popFirst()!
        if levels[level].isEmpty { nonEmpty &= ~(1 << UInt32(level)) }
        if level == Self.backgroundLevel {
            runningBackground += 1
            backgroundProgress &+= 1
        }
        return (job, level)
    }

    /// A job that `popFirst()` returned at `level` has returned.
    @inline(__always)
    mutating func finished(level: Int) {
        guard level == Self.backgroundLevel else { return }
        runningBackground -= 1
        backgroundProgress &+= 1
        if extraBackgroundWidth > 0 { extraBackgroundWidth -= 1 }
    }

    /// Lets one more `.background` job start (the running ones seem blocked).
    mutating func widen() {
        extraBackgroundWidth += 1
    }

    func _invariantCheck() {
        precondition(count == levels.reduce(0) { $0 + $1.count })
        for (level, jobs) in levels.enumerated() {
            precondition((nonEmpty & (1 << UInt32(level)) != 0) == !jobs.isEmpty)
        }
        precondition(runningBackground >= 0 && extraBackgroundWidth >= 0)
        precondition(untilAging >= 1 && untilAging <= Self.agingPeriod)
    }
}
