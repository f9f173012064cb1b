import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// What the scheduler of an fd entry keeps on each operation: fixed traits
/// taken when it is queued, and where it is in its life. Written only by the
/// `EntryScheduler` that queued the operation (under its entry's lock).
struct SchedulerTicket {
    enum State: Equatable {
        /// Queued, not started.
        case queued
        /// Withdrawn before it started (a stop): skipped when reached.
        case withdrawn
        /// Started; its I/O has not ended.
        case running
        /// Its I/O ended.
        case finished
    }

    var state = State.queued
    /// A stream operation (one at a time per lane, in order).
    var isStream = false
    /// Its lane: 0, or 1 for writes where the directions are independent.
    var lane = 0
    /// A write (asked whether it must run alone in direct-I/O mode).
    var isWrite = false
    /// A stream write that may go out in one `pwritev` with the stream
    /// writes queued next to it (`EntryScheduler.Item.writes`).
    var pipelinable = false
    /// Its length in bytes.
    var length = 0
    /// How many memory regions its bytes are in (one iovec each).
    var regions = 1
    /// It runs alone on its entry (a direct write's read-modify-write).
    var ranExclusive = false
}

/// An operation the scheduler can queue: it carries its own ticket.
protocol SchedulableOperation: AnyObject {
    /// Read and written only by the scheduler holding it, under its lock.
    var ticket: SchedulerTicket { get set }
}

/// What the scheduler asks of the file while it decides (the shell answers
/// with `lseek` and the direct-I/O alignment; tests answer from a model).
protocol EntrySchedulerHost<Operation> {
    associatedtype Operation
    /// The fd is in direct-I/O mode: writes may have to run alone.
    var directMode: Bool { get }
    /// The file position now (`lseek(fd, 0, SEEK_CUR)`), `nil` on error.
    func filePosition() -> Int64?
    /// In direct-I/O mode: whether the write `operation` must run alone,
    /// starting at `streamPosition` (`nil`: a stream write whose start is
    /// not known yet).
    func needsExclusiveRun(_ operation: Operation, streamPosition: Int64?) -> Bool
    /// Whether the pipelinable write `operation` may go out in one
    /// `pwritev` with others now (in direct-I/O mode: its regions are
    /// aligned in memory and in length).
    func mayCoalesce(_ operation: Operation) -> Bool
    /// The fd has `O_APPEND`: every write lands at the end of the file,
    /// whatever its offset, so at most one run is in flight at a time (two
    /// at once could land in either order), and `filePosition` answers
    /// where the next write lands: the end of the file.
    var appendMode: Bool { get }
}

extension EntrySchedulerHost {
    var appendMode: Bool { false }
}
