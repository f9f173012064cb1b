#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOQueue
import RingIOChannel

/// The reader behind `DirectoryEntries`: directories read in batches
/// (`getdents64`) by jobs on `IOQueue.global`, several at once for a
/// recursive walk, handed to one consumer with backpressure.
///
/// ```
///  pending (stack of      open (fds with more      batches (≤ bufferedBatches)
///  paths not yet opened)  entries to read)         ──▶ next() of the consumer
///        │ open                  │ getdents64               ▲
///        └──────────▶ job ◀──────┘ ─── entries, subdirectories┘
/// ```
///
/// A job opens one directory (or takes one already open), fills a buffer
/// with `getdents64` until it is full or the directory ends, and hands the
/// batch over: its subdirectories go onto `pending` (a stack: the walk goes
/// depth-first), the directory back onto `open` if it has more. At most
/// `jobs` jobs run at once, at most `descriptors` directories are open at
/// once, whatever the tree's depth (a directory is named by its path, not
/// held open by its children), and at most `bufferedBatches` batches wait
/// for the consumer: a consumer that stops pulling stops the walk.
package final class DirectoryWalk: Sendable {
    /// The bounds of one walk.
    package struct Limits: Sendable {
        /// Jobs running at once (each a pool worker in a system call).
        package var jobs: Int
        /// Directories open at once.
        package var descriptors: Int
        /// Batches read ahead of the consumer.
        package var bufferedBatches: Int
        /// The `getdents64` buffer of one job, in bytes.
        package var bufferSize: Int

        /// Four jobs, 32 directories, 16 batches of 32 KiB (about 1,000
        /// entries of short names each): 100,000 entries in 100 directories
        /// list in the time of `find` on 2 cores; a fifth job gained
        /// nothing there.
        package static let recursive = Limits(jobs: 4, descriptors: 32, bufferedBatches: 16, bufferSize: 32 << 10)
        /// One directory: one job at a time (its batches come in order),
        /// one batch read ahead.
        package static let single = Limits(jobs: 1, descriptors: 1, bufferedBatches: 2, bufferSize: 32 << 10)
    }

    /// One directory to read: the path shown in its entries (under the
    /// listed path as given) and the absolute path it is opened by.
    struct Directory: Sendable {
        var shown: FilePath
        var opened: FilePath
        var fd: CInt = -1
        var isRoot = false
    }

    /// What the consumer gets from `next()`.
    enum Next: Sendable {
        case batch([DirectoryEntry])
        case end
        case failure(IOError)
        /// A directory that could not be read, in a walk that goes on
        /// without it (`continuesAfterFailures`).
        case skipped(IOError)
    }

    struct State {
        var started = false
        var pending: [Directory] = []
        var open: [Directory] = []
        var batches = RingBuffer<[DirectoryEntry]>(initialCapacity: 4)
        var running = 0
        var descriptors = 0
        var peakDescriptors = 0
        var failure: IOError?
        /// With `continuesAfterFailures`: directories that failed, not yet handed over.
        var skipped: [IOError] = []
        var cancelled = false
        var waiter: UnsafeContinuation<Next, Never>?

        var isDone: Bool { pending.isEmpty && open.isEmpty && running == 0 }
    }

    let root: Directory
    let recursive: Bool
    let limits: Limits
    /// A directory that cannot be read is handed over as `.skipped` and the
    /// walk goes on with the others (`IO.copyItem` with an error handler);
    /// otherwise its error ends the walk.
    let continuesAfterFailures: Bool
    private let state = Locked(State())

    init(shown: FilePath, opened: FilePath, recursive: Bool, limits: Limits, continuesAfterFailures: Bool = false) {
        root = Directory(shown: shown, opened: opened, isRoot: true)
        self.recursive = recursive
        self.limits = limits
        self.continuesAfterFailures = continuesAfterFailures
    }

    /// The most directories this walk has had open at once.
    package var peakDescriptors: Int { state.withLock { $0.peakDescriptors } }

    /// The next batch, the end, or the walk's first error (after the
    /// batches read before it).
    func next() async -> Next {
        if Task.isCancelled {
            cancel()
            return .failure(IOError(.list, path: root.shown, errno: .canceled))
        }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Next, Never>) in
                var jobs: [Directory] = []
                let ready = state.withLock { s -> Next? in
                    if !s.started {
                        s.started = true
                        s.pending.append(root)
                    }
                    let ready = Self.ready(&s)
                    if ready == nil { s.waiter = continuation }
                    jobs = schedule(&s)
                    return ready
                }
                start(jobs)
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            cancel()
        }
    }

    /// What the consumer can have now, if anything.
    private static func ready(_ s: inout State) -> Next? {
        if let batch = s.batches.popFirst() { return .batch(batch) }
        if !s.skipped.isEmpty { return .skipped(s.skipped.removeFirst()) }
        if let failure = s.failure { return .failure(failure) }
        if s.cancelled { return .end }
        if s.isDone { return .end }
        return nil
    }

    /// Takes the jobs that may start now: directories already open first
    /// (to close them sooner), then the newest pending one (depth-first).
    private func schedule(_ s: inout State) -> [Directory] {
        var jobs: [Directory] = []
        while !s.cancelled, s.failure == nil, s.running < limits.jobs,
              s.batches.count + s.running < limits.bufferedBatches {
            if let directory = s.open.popLast() {
                jobs.append(directory)
            } else if s.descriptors < limits.descriptors, let directory = s.pending.popLast() {
                s.descriptors += 1
                s.peakDescriptors = Swift.max(s.peakDescriptors, s.descriptors)
                jobs.append(directory)
            } else {
                break
            }
            s.running += 1
        }
        return jobs
    }

    private func start(_ jobs: [Directory]) {
        for directory in jobs {
            IOQueue.global.async { self.run(directory) }
        }
    }

    /// Stops the walk: no more jobs; open directories are closed (a running
    /// job closes its own when it returns); a waiting consumer gets
    /// `ECANCELED`.
    func cancel() {
        var toClose: [CInt] = []
        let waiter = state.withLock { s -> UnsafeContinuation<Next, Never>? in
            guard !s.cancelled else { return nil }
            s.cancelled = true
            toClose = s.open.map(\.fd)
            s.descriptors -= s.open.count
            s.open = []
            s.pending = []
            s.batches = RingBuffer(initialCapacity: 1)
            defer { s.waiter = nil }
            return s.waiter
        }
        for fd in toClose { Syscall.closeIgnoringErrors(fd) }
        waiter?.resume(returning: .failure(IOError(.list, path: root.shown, errno: .canceled)))
    }

    /// One job, on a pool worker: opens `directory` if it is not open,
    /// reads a batch, and hands it over.
    private func run(_ directory: Directory) {
        var directory = directory
        let read = DirectoryReader.readBatch(&directory, recursive: recursive, bufferSize: limits.bufferSize)
        finish(directory, read)
    }

    /// Hands a job's batch to the state: entries to the consumer,
    /// subdirectories onto the stack, the directory back if it has more.
    private func finish(_ directory: Directory, _ read: DirectoryReader.Batch) {
        var jobs: [Directory] = []
        var closeFD: CInt = -1
        let handOver = state.withLock { s -> (UnsafeContinuation<Next, Never>, Next)? in
            s.running -= 1
            // The reader closed the directory when it `ended` (at its end,
            // or on an error); a cancelled walk closes it here.
            if read.ended {
                s.descriptors -= 1
            } else if s.cancelled {
                s.descriptors -= 1
                closeFD = directory.fd
            } else {
                s.open.append(directory)
            }
            if s.cancelled { return nil }
            if let failure = read.failure {
                if continuesAfterFailures {
                    s.skipped.append(failure)
                } else if s.failure == nil {
                    s.failure = failure
                }
            }
            if !read.entries.isEmpty { s.batches.append(read.entries) }
            s.pending.append(contentsOf: read.subdirectories.reversed())
            jobs = schedule(&s)
            guard let waiter = s.waiter, let ready = Self.ready(&s) else { return nil }
            s.waiter = nil
            return (waiter, ready)
        }
        if closeFD >= 0 { Syscall.closeIgnoringErrors(closeFD) }
        start(jobs)
        if let (waiter, next) = handOver { waiter.resume(returning: next) }
    }
}

/// Ends a walk when the last iterator holding it goes away.
final class DirectoryWalkOwner: Sendable {
    let walk: DirectoryWalk
    init(_ walk: DirectoryWalk) { self.walk = walk }
    deinit { walk.cancel() }
}
