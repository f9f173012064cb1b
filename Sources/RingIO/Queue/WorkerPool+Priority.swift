import RingIOBase

/// The worker pool's waiting jobs, one FIFO per priority level.
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
struct PriorityJobs {
    /// One start in `agingPeriod` goes to a lower level with work.
    static let agingPeriod = 8
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

    var isEmpty: Bool { count == 0 }

    @inline(__always)
    mutating func append(_ job: PoolJob) {
        let level = job.level
        levels[level].append(job)
        nonEmpty |= 1 << UInt32(level)
        count += 1
    }

    @inline(__always)
    mutating func popFirst() -> PoolJob? {
        guard count > 0 else { return nil }
        let high = 31 - nonEmpty.leadingZeroBitCount
        var level = high
        let lower = nonEmpty & ((1 << UInt32(high)) - 1)
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
        let job = levels[level].popFirst()
        if levels[level].isEmpty { nonEmpty &= ~(1 << UInt32(level)) }
        return job
    }
}
