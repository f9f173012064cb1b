#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOChannel
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

/// A copy between two files inside the kernel: each chunk is spliced from
/// the source into a pipe (page references, no copy) and from the pipe into
/// the destination (one copy), the two linked in one chain. `lanes` chunks
/// are in flight, each with its own pipe.
///
/// Completions run on the engine's thread: each one only updates the state
/// and submits the next requests.
final class SpliceCopy: Sendable {
    private struct State {
        var pending: [Range<Int64>]
        var active = 0
        var failure: IOError?
        var endedAt: Int64?
        var cancelled = false
        var continuation: UnsafeContinuation<IOError?, Never>?
        var finished = false
    }

    /// One chunk in flight: its pipe, and what the pipe holds.
    // @unchecked: a lane is used by one chunk at a time, and its fields are
    // touched only in that chunk's completions, which the engine runs one
    // after another (a chain's completions are ordered, and the next chain
    // is submitted from the last completion).
    private final class Lane: @unchecked Sendable {
        let readEnd: Int32
        let writeEnd: Int32
        let capacity: Int
        init(readEnd: Int32, writeEnd: Int32, capacity: Int) {
            self.readEnd = readEnd
            self.writeEnd = writeEnd
            self.capacity = capacity
        }
        deinit {
            Syscall.closeIgnoringErrors(readEnd)
            Syscall.closeIgnoringErrors(writeEnd)
        }
    }

    private let source: Int32
    private let destination: Int32
    private let engine: IOEngine
    private let lanes: [Lane]
    private let state: Locked<State>
    private let progress: @Sendable (Int) -> Void

    /// - Throws: the `pipe2` error (`EMFILE`, `ENFILE`).
    init(source: Int32, destination: Int32, regions: [Range<Int64>], lanes laneCount: Int = 4,
         pipeSize: Int = 1 << 20, engine: IOEngine, progress: @escaping @Sendable (Int) -> Void) throws(Errno) {
        self.source = source
        self.destination = destination
        self.engine = engine
        self.progress = progress
        var lanes: [Lane] = []
        for _ in 0..<Swift.max(laneCount, 1) {
            // As large as allowed: fewer, larger splices. The kernel may round it.
            let pipe = try Syscall.pipe(capacity: pipeSize)
            lanes.append(Lane(readEnd: pipe.read, writeEnd: pipe.write, capacity: pipe.capacity))
        }
        self.lanes = lanes
        let chunk = Int64(lanes.map(\.capacity).min()!)
        var chunks: [Range<Int64>] = []
        for region in regions {
            var offset = region.lowerBound
            while offset < region.upperBound {
                let end = Swift.min(offset + chunk, region.upperBound)
                chunks.append(offset..<end)
                offset = end
            }
        }
        state = Locked(State(pending: chunks.reversed()))
    }

    /// Where the source ended early (it shrank under the copy), if it did.
    var endedAt: Int64? { state.withLock { $0.endedAt } }

    /// Copies every region; on task cancellation stops starting chunks and
    /// fails with `ECANCELED` once those in flight are done.
    func run() async throws(IOError) {
        let failure = await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<IOError?, Never>) in
                state.withLock { $0.continuation = continuation }
                for lane in lanes { next(lane) }
            }
        } onCancel: {
            state.withLock { $0.cancelled = true }
        }
        if let failure { throw failure }
    }

    /// Starts the next chunk on `lane`, or retires the lane.
    private func next(_ lane: Lane) {
        let action = state.withLock { s -> Range<Int64>? in
            if s.cancelled && s.failure == nil { s.failure = IOError(.read, path: nil, side: .source, errno: .canceled) }
            if s.failure == nil, s.endedAt == nil, let chunk = s.pending.popLast() {
                s.active += 1
                return chunk
            }
            return nil
        }
        if let chunk = action {
            spliceIn(lane, chunk)
        } else {
            finishIfIdle()
        }
    }

    private func finishIfIdle() {
        let resume = state.withLock { s -> (UnsafeContinuation<IOError?, Never>, IOError?)? in
            guard s.active == 0, !s.finished, let continuation = s.continuation,
                  s.pending.isEmpty || s.failure != nil || s.endedAt != nil else { return nil }
            s.finished = true
            s.continuation = nil
            return (continuation, s.failure)
        }
        if let (continuation, failure) = resume { continuation.resume(returning: failure) }
    }

    /// Source → pipe, linked to pipe → destination.
    private func spliceIn(_ lane: Lane, _ chunk: Range<Int64>) {
        let length = Int(chunk.count)
        let results = Locked<(Int32?, Int32?)>((nil, nil))
        let both: @Sendable (Int32?, Int32?) -> Void = { [self] first, second in
            let pair = results.withLock { r -> (Int32, Int32)? in
                if let first { r.0 = first }
                if let second { r.1 = second }
                guard let a = r.0, let b = r.1 else { return nil }
                return (a, b)
            }
            if let (read, written) = pair { chunkDone(lane, chunk, read: read, written: written) }
        }
        engine.submit(linked: [
            IORequest(.splice(input: source, inputOffset: chunk.lowerBound, output: lane.writeEnd, outputOffset: -1,
                              length: length), owner: lane) { res in both(res, nil) },
            IORequest(.splice(input: lane.readEnd, inputOffset: -1, output: destination, outputOffset: chunk.lowerBound,
                              length: length), owner: lane) { res in both(nil, res) },
        ])
    }

    private func chunkDone(_ lane: Lane, _ chunk: Range<Int64>, read: Int32, written: Int32) {
        if read < 0 {
            return fail(lane, IOError(.read, path: nil, side: .source, errno: Errno(rawValue: -read)))
        }
        if read == 0 && chunk.count > 0 {
            // EOF: the source shrank under the copy.
            state.withLock { $0.endedAt = Swift.min($0.endedAt ?? chunk.lowerBound, chunk.lowerBound) }
            return retire(lane)
        }
        // A short read broke the chain: the write was cancelled without running.
        let moved = written > 0 ? Int(written) : 0
        if written < 0 && written != -ECANCELED {
            return fail(lane, IOError(.write, path: nil, side: .destination, errno: Errno(rawValue: -written)))
        }
        drain(lane, chunk, inPipe: Int(read), moved: moved)
    }

    /// Empties the pipe into the destination, then continues the chunk.
    private func drain(_ lane: Lane, _ chunk: Range<Int64>, inPipe: Int, moved: Int) {
        if moved < inPipe {
            let offset = chunk.lowerBound + Int64(moved)
            engine.submit(IORequest(.splice(input: lane.readEnd, inputOffset: -1, output: destination,
                                            outputOffset: offset, length: inPipe - moved), owner: lane) { [self] res in
                if res <= 0 {
                    return fail(lane, IOError(.write, path: nil, side: .destination, errno: res < 0 ? Errno(rawValue: -res) : .noSpace))
                }
                drain(lane, chunk, inPipe: inPipe, moved: moved + Int(res))
            })
            return
        }
        progress(inPipe)
        let rest = (chunk.lowerBound + Int64(inPipe))..<chunk.upperBound
        if rest.isEmpty {
            retire(lane)
        } else {
            spliceIn(lane, rest)
        }
    }

    private func retire(_ lane: Lane) {
        state.withLock { $0.active -= 1 }
        next(lane)
    }

    private func fail(_ lane: Lane, _ failure: IOError) {
        state.withLock { s in
            if s.failure == nil { s.failure = failure }
            s.active -= 1
        }
        // The lane's pipe may hold bytes: it is not reused.
        finishIfIdle()
    }
}

extension IO {
    /// Copies `ranges` of `source` to the same offsets in `destination`
    /// inside the kernel: each chunk (a pipe's capacity, 1 MiB where
    /// allowed) is spliced from the source into a pipe, which takes page
    /// references without copying, and linked to a splice from the pipe into
    /// the destination, the one copy. `lanes` chunks are in flight, each
    /// with its own pipe. The bytes never enter user space, so nothing
    /// is buffered in the process.
    ///
    /// `pipeSize` asks for each pipe's capacity, the chunk size (the kernel
    /// may round it; above `/proc/sys/fs/pipe-max-size` it needs
    /// `CAP_SYS_RESOURCE`). Larger pipes measured slower here.
    ///
    /// `progress` is called with the bytes of each chunk once they are in
    /// the destination, on the engine's thread: keep it short.
    ///
    /// - Returns: where the source ended, if it ended before the last range
    ///   did (it shrank under the copy); `nil` otherwise.
    /// - Throws: an `IOError` for the first failed splice: `.read` on the
    ///   `.source` side or `.write` on the `.destination` side, with its
    ///   errno (no path: the files are given as descriptors); `ECANCELED`
    ///   (a `.read` on the source side) when the task is cancelled, once the
    ///   chunks in flight are done; `.copy` with no side when the pipes
    ///   cannot be made (`EMFILE`, `ENFILE`).
    @discardableResult
    public static func copyRanges(_ ranges: [Range<Int64>], from source: FileDescriptor, to destination: FileDescriptor,
                                  lanes: Int = 4, pipeSize: Int = 1 << 20, engine: IOEngine = .shared,
                                  progress: @escaping @Sendable (Int) -> Void = { _ in }) async throws(IOError) -> Int64? {
        let copy: SpliceCopy
        do {
            copy = try SpliceCopy(source: source.rawValue, destination: destination.rawValue, regions: ranges,
                                  lanes: lanes, pipeSize: pipeSize, engine: engine, progress: progress)
        } catch {
            throw IOError(.copy, path: nil, errno: error)
        }
        try await copy.run()
        return copy.endedAt
    }
}
