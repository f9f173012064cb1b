#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

/// Stream writes of one regular file that were queued one after the other
/// and go out as one `pwritev` at the file position (`EntryScheduler`'s
/// `Item.writes`), then report one by one, in order, each with its own
/// written and unwritten bytes.
///
/// ```
///   file position ─▶ | write A | write B      | write C | write D |
///   one pwritev:     |==================|  (short: 1.5 writes' worth, then ENOSPC)
///   reports:           A: done   B: cut, its first bytes written, ENOSPC
///                                                C, D: all unwritten, ECANCELED
/// ```
///
/// A short `pwritev` goes on from where it stopped, one request at a time,
/// so the bytes on disk are always a prefix of the run: `attribute` hands
/// them to the writes in order. Once the run is submitted it is not
/// cancelled (a stop reaches the writes not yet submitted): the file
/// writes it carries take no longer than the kernel's copy.
// @unchecked: `lengths`, `sizeAtStart`, `done`, `first`, `written`, `error` and the iovecs
// are set by `start` and then touched only by the completion of the one
// request in flight, which submits the next; the last one sets `written` and
// `error` before it takes the entry's lock, under which the entry reads them
// (possibly on another thread, releasing the runs in order); the rest is
// immutable.
final class CoalescedWrite: @unchecked Sendable {
    /// What one write of the run reports.
    enum Outcome: Equatable {
        /// All its bytes are on disk.
        case written
        /// The run stopped inside it: its first `bytes` are on disk.
        case cut(bytes: Int, Errno)
        /// None of its bytes reached the file.
        case untouched(Errno)
    }

    /// How `written` bytes of a run, then `error` (`nil`: the run ended
    /// whole), fall to its writes of `lengths` bytes, in order. `nil` among
    /// the lengths: a write stopped before the run went out (not in it).
    static func attribute(lengths: [Int?], written: Int, error: Errno?) -> [Outcome] {
        var left = written
        var failed = false
        return lengths.map { length -> Outcome in
            guard let length else { return .untouched(.canceled) }
            if failed { return .untouched(.canceled) }
            if left >= length {
                left -= length
                return .written
            }
            failed = true
            defer { left = 0 }
            return .cut(bytes: left, error ?? .ioError)
        }
    }

    let entry: FDEntry
    let operations: [ChannelOperation]
    /// Where the run starts in the file.
    let offset: Int64
    /// Each write's length, `nil` for one stopped before the run went out.
    private(set) var lengths: [Int?] = []
    /// Once the run ended: the bytes written (a prefix of the run), and why
    /// it stopped short (`nil`: it did not).
    private(set) var written = 0
    private(set) var error: Errno?
    /// The file's size just before the run went out (`Int64.max`: unknown).
    /// A run that stops short takes back the bytes of the runs behind it
    /// only when nothing past where it stopped was there before it.
    private(set) var sizeAtStart = Int64.max
    private var total = 0
    /// Bytes written so far (a prefix of the run).
    private var done = 0
    private var iovecs: UnsafeMutablePointer<iovec>?
    private var count = 0
    /// The first iovec not wholly written.
    private var first = 0

    init(entry: FDEntry, operations: [ChannelOperation], offset: Int64) {
        self.entry = entry
        self.operations = operations
        self.offset = offset
    }

    deinit { iovecs?.deallocate() }

    /// Sends the run (the entry has started its writes).
    func start() {
        if let status = try? Syscall.fstat(entry.fd) { sizeAtStart = status.size }
        lengths = operations.map { $0.beginCoalesced() ? $0.length : nil }
        var regions = 0
        for (operation, length) in zip(operations, lengths) where length != nil {
            regions += operation.data.regionCount
        }
        let iovecs = UnsafeMutablePointer<iovec>.allocate(capacity: Swift.max(regions, 1))
        for (operation, length) in zip(operations, lengths) where length != nil {
            operation.data.apply { _, _, bytes in
                iovecs[count] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                                      iov_len: bytes.count)
                count += 1
                total += bytes.count
                return true
            }
        }
        self.iovecs = iovecs
        if total == 0 {
            entry.coalescedWritesEnded(self)
        } else {
            submitRest()
        }
    }

    /// Writes what is left of the run, at where it is left.
    private func submitRest() {
        let operation = IORequest.Operation.writev(fd: entry.fd, iovecs: iovecs! + first, count: count - first,
                                                   offset: offset + Int64(done))
        let request = IORequest(operation, owner: self, mayBlock: false, fixedBuffer: nil,
                                fixedFile: entry.fixedFile) { [self] res in completed(res) }
        operations[0].engine.submit(request)
    }

    private func completed(_ res: Int32) {
        if res > 0 {
            done += Int(res)
            if done < total {
                skip(Int(res))
                submitRest()  // a short write: go on from where it stopped
                return
            }
            written = done
            entry.coalescedWritesEnded(self)
        } else if res == -EINTR || res == -EAGAIN {
            submitRest()
        } else {
            // A write that moved nothing would loop forever.
            written = done
            error = res == 0 ? Errno.ioError : Errno(rawValue: -res)
            entry.coalescedWritesEnded(self)
        }
    }

    /// Moves the iovecs past `bytes` written.
    private func skip(_ bytes: Int) {
        var left = bytes
        while left > 0, let iovecs {
            let length = iovecs[first].iov_len
            if length <= left {
                left -= length
                first += 1
            } else {
                iovecs[first].iov_base = iovecs[first].iov_base.map { $0 + left }
                iovecs[first].iov_len -= left
                left = 0
            }
        }
    }
}

// A write's side of a coalesced run.
extension ChannelOperation {
    /// In direct-I/O mode: whether this write's bytes may go to the file as
    /// they are (`OperationProgress.mayCoalesce`).
    func mayCoalesce(_ alignment: DirectAlignment) -> Bool {
        fixed { $0.mayCoalesce(alignment) }
    }

    /// The entry put this write in a coalesced `pwritev`: false if it was
    /// stopped first (it is left out, and reports all its bytes unwritten).
    func beginCoalesced() -> Bool {
        lock.withLock { state.beginCoalesced() }
    }

    /// This write's share of its coalesced `pwritev`: ends its I/O and queues
    /// its last handler call (the entry's lock is held). Returns whether the
    /// caller must run it: on `queue`, or (inline operations) once it holds
    /// no lock.
    func finishCoalesced(_ outcome: CoalescedWrite.Outcome) -> Bool {
        lock.withLock {
            switch outcome {
            case .written: state.finishCoalesced(written: length, error: nil)
            case .cut(let bytes, let error): state.finishCoalesced(written: bytes, error: error)
            case .untouched(let error): state.finishCoalesced(written: 0, error: error)
            }
        }
    }
}
