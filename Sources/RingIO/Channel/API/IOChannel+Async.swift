#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

/// One awaited operation (`read` or `write`): the task's continuation,
/// the bytes delivered so far, and the link between the task's
/// cancellation and the operation. One allocation per `await`; the
/// operation's handler captures only this object, so it needs no closure
/// context of its own.
///
/// Cancellation: whichever comes second, `attach` (the operation was
/// submitted) or `cancel` (the task was cancelled), stops the operation,
/// once; a finished operation is never stopped. The awaiting task drops
/// the operation (`detach`) once it is resumed and its cancellation
/// handler is gone: the operation's handler captures this object, so
/// holding the operation longer would be a retain cycle, and dropping it
/// from the handler itself could free the operation while it is still
/// calling that handler.
// @unchecked: `continuation` is written once, before the operation is
// submitted, and read by its last handler call (the submission's locks
// order the two). `collected` is touched only by the handler, whose calls
// run one at a time and in order, each after the last returned (the
// operation's lock orders them even across threads). `operation` is
// written by `attach` before `phase` becomes `attached` (releasing), read
// by the one `cancel` that moves `phase` from `attached` to `finished`
// (acquiring), and cleared by `detach` after the task's cancellation
// handler was removed (no `cancel` runs any more).
final class AwaitedOperation<Value: Sendable>: @unchecked Sendable {
    private static var fresh: UInt8 { 0 }
    private static var attached: UInt8 { 1 }
    private static var cancelRequested: UInt8 { 2 }
    private static var finished: UInt8 { 3 }

    private let phase = Atomic<UInt8>(0)
    private var operation: ChannelOperation?
    var continuation: UnsafeContinuation<Result<Value, Errno>, Never>?
    var collected = DataChunk.empty

    init() {}

    /// The operation was submitted: keep it for `cancel`, or stop it now
    /// when the task was cancelled first.
    func attach(_ operation: ChannelOperation) {
        self.operation = operation
        if phase.compareExchange(expected: Self.fresh, desired: Self.attached,
                                 ordering: .acquiringAndReleasing).exchanged { return }
        // Cancelled first, or already finished: nobody else reads `operation`.
        self.operation = nil
        if phase.exchange(Self.finished, ordering: .acquiringAndReleasing) == Self.cancelRequested {
            AwaitedOperation.stop(operation)
        }
    }

    /// The task was cancelled (its cancellation handler).
    func cancel() {
        var current = phase.load(ordering: .acquiring)
        while true {
            let next = current == Self.fresh ? Self.cancelRequested : Self.finished
            if current == Self.cancelRequested || current == Self.finished { return }
            let (exchanged, original) = phase.compareExchange(expected: current, desired: next,
                                                              ordering: .acquiringAndReleasing)
            if exchanged { break }
            current = original
        }
        // `fresh → cancelRequested`: `attach` stops it. `attached → finished`: ours to stop.
        guard current == Self.attached, let operation else { return }
        AwaitedOperation.stop(operation)
    }

    /// The operation's last handler call: a cancellation from now on has
    /// nothing to stop.
    func finish() {
        phase.store(Self.finished, ordering: .releasing)
    }

    /// The awaiting task, resumed and out of its cancellation handler's
    /// scope: drops the operation.
    func detach() {
        operation = nil
    }

    private static func stop(_ operation: ChannelOperation) {
        operation.channel?.cancel(operation) ?? operation.stop()
    }
}

extension IOChannel {
    /// Reads `length` bytes (`Int.max`: to the end of the file) at `offset`
    /// (random channels; stream channels read at the file position) and
    /// returns them; fewer at the end of the file.
    ///
    /// Cached bytes of a regular file (up to 256 KiB, nothing queued ahead
    /// of the read on its descriptor) are read on the calling thread, and
    /// the call returns without suspending. Otherwise the task resumes
    /// straight from the completion of the last request, without a hop
    /// through a queue. Cancelling the task cancels the read in the kernel
    /// (a read blocked on an empty pipe ends at once) and throws
    /// `Errno.canceled`; the bytes read until then are dropped. A task
    /// cancelled before the call reads nothing.
    ///
    /// - Throws: the read's error (`EBADF`, `EISDIR`, `ECANCELED` after
    ///   `close` or cancellation, ...).
    @inlinable
    public nonisolated(nonsending) func read(offset: Int64 = 0, length: Int) async throws(Errno) -> DataChunk {
        // (Inlinable, and on the caller's executor: a read done at once
        // costs the caller no async frame and no executor switch.)
        switch try readBeforeSuspending(offset: offset, length: length) {
        case .read(let chunk): return chunk
        case .submit(let skipInlineTry): return try await submitRead(offset: offset, length: length,
                                                                    skipInlineTry: skipInlineTry)
        }
    }

    /// What `read` does before any suspension.
    @usableFromInline
    func readBeforeSuspending(offset: Int64, length: Int) throws(Errno) -> ReadStart {
        // Cancelled already: nothing is read.
        if Task.isCancelled { throw .canceled }
        // Cached bytes of a regular file, nothing ahead of it on the fd: read
        // here, before any suspension (no continuation, no hop).
        switch core.readNow(offset: offset, length: length) {
        case .read(let chunk): return .read(chunk)
        case .submit(let skipInlineTry): return .submit(skipInlineTry: skipInlineTry)
        }
    }

    /// What `readBeforeSuspending` came to (`ChannelCore.InlineRead`).
    @usableFromInline
    enum ReadStart {
        case read(DataChunk)
        case submit(skipInlineTry: Bool)
    }

    /// `read`, as an operation of the channel, awaited.
    @usableFromInline
    func submitRead(offset: Int64, length: Int, skipInlineTry: Bool) async throws(Errno) -> DataChunk {
        let core = self.core
        var options = OperationOptions(inline: true)
        options.skipInlineTry = skipInlineTry
        let awaited = AwaitedOperation<DataChunk>()
        let result = await withTaskCancellationHandler {
            // Unsafe (unchecked) continuation: the operation calls its handler
            // with `done` exactly once (docs/Semantics.md, "Handlers": every
            // operation ends with one last handler call), and only that call
            // resumes.
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<DataChunk, Errno>, Never>) in
                awaited.continuation = continuation
                // `inline`: the handler runs on the thread that completed the
                // read (the ring thread, usually), with no queue hop; the
                // resumed task then runs on its executor (see ThreadsAndExecutors).
                let operation = core.submit(direction: .read, offset: offset, length: Swift.max(length, 0),
                                            data: .empty, queue: core.queue, options: options) { done, data, error in
                    if let data, !data.isEmpty {
                        awaited.collected = awaited.collected.isEmpty ? data : awaited.collected.concat(data)
                    }
                    guard done else { return }
                    awaited.finish()
                    let continuation = awaited.continuation.take()!
                    if let error {
                        continuation.resume(returning: .failure(error))
                    } else {
                        let collected = awaited.collected
                        awaited.collected = .empty
                        continuation.resume(returning: .success(collected))
                    }
                }
                awaited.attach(operation)
            }
        } onCancel: {
            awaited.cancel()
        }
        awaited.detach()
        return try result.get()
    }

    /// Writes `data` at `offset` (random channels; stream channels write at
    /// the file position) and returns once all of it is written.
    ///
    /// A write of up to 64 KiB to a regular file, with nothing queued ahead
    /// of it on its descriptor, is a plain `write(2)` on the calling thread
    /// (as `FileHandle`'s is): it returns without suspending, and may block
    /// the thread for milliseconds while the kernel throttles dirty pages.
    /// Queue writes with a handler to keep them off the caller's thread.
    ///
    /// Cancelling the task cancels the write in the kernel and throws
    /// `Errno.canceled`; some bytes may have been written by then. A task
    /// cancelled before the call writes nothing.
    ///
    /// - Throws: the write's error (`EBADF`, `ENOSPC`, `EPIPE`, ...).
    public func write(offset: Int64 = 0, data: DataChunk) async throws(Errno) {
        // Cancelled already: nothing is written.
        if Task.isCancelled { throw .canceled }
        // A small write to a regular file, nothing ahead of it on the fd:
        // written here, before any suspension (a plain `write(2)`, which may
        // block while the kernel throttles dirty pages).
        if let result = core.writeNow(offset: offset, data: data) { return try result.get() }
        try await submitWrite(offset: offset, data: data)
    }

    /// `write`, as an operation of the channel, awaited.
    private func submitWrite(offset: Int64, data: DataChunk) async throws(Errno) {
        let core = self.core
        let awaited = AwaitedOperation<Void>()
        let result = await withTaskCancellationHandler {
            // Unsafe continuation: only the one `done` handler call resumes (see `read`).
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<Void, Errno>, Never>) in
                awaited.continuation = continuation
                let operation = core.submit(direction: .write, offset: offset, length: data.count, data: data,
                                            queue: core.queue,
                                            options: OperationOptions(inline: true)) { done, _, error in
                    guard done else { return }
                    awaited.finish()
                    awaited.continuation.take()!.resume(returning: error.map { .failure($0) } ?? .success(()))
                }
                awaited.attach(operation)
            }
        } onCancel: {
            awaited.cancel()
        }
        awaited.detach()
        try result.get()
    }

    /// The bytes from `offset` (random channels; stream channels read at the
    /// file position), `length` of them or to the end of the file, as an
    /// asynchronous sequence of chunks.
    ///
    /// The read starts with the first `next()` and stays at most two chunks
    /// ahead of the consumer. The channel's water marks shape the chunks
    /// (by default 1 MiB on files, what each read returns on pipes and
    /// sockets). Leaving the loop early, or cancelling the task, cancels the
    /// read in the kernel; cancellation throws `Errno.canceled`.
    ///
    /// ```swift
    /// for try await chunk in source.chunks() {
    ///     try await target.write(data: chunk)
    /// }
    /// ```
    public func chunks(offset: Int64 = 0, length: Int = .max) -> Chunks {
        Chunks(channel: self, offset: offset, length: Swift.max(length, 0))
    }

    /// Waits for every earlier operation of every channel of this file, then
    /// flushes the file to its device (`fsync`, or `fdatasync` with
    /// `dataOnly`), as a barrier: no later operation starts until it is done.
    ///
    /// - Throws: the `fsync` error (`EIO`, `ENOSPC`, ...); `ECANCELED` when
    ///   the channel is closed or could not open its file.
    public func synchronize(dataOnly: Bool = false) async throws(Errno) {
        let error = await barrier { () -> Errno? in
            // (Not `fileDescriptor`, which would pin a path channel's fd.)
            guard let fd = self.core.currentDescriptor else { return .canceled }
            do throws(Errno) { try Syscall.fsync(fd, dataOnly: dataOnly) } catch { return error }
            return nil
        }
        if let error { throw error }
    }

    /// Runs `work` as a barrier (see `barrier(_:)`) and returns its result.
    func barrier<T: Sendable>(returning work: @escaping @Sendable () -> T) async -> T {
        await withUnsafeContinuation { continuation in
            barrier { continuation.resume(returning: work()) }
        }
    }

    /// An asynchronous sequence of the chunks of one read, with backpressure.
    public struct Chunks: AsyncSequence, Sendable {
        /// Each element is one delivery of the read.
        public typealias Element = DataChunk
        /// The read's error; `Errno.canceled` when the task is cancelled.
        public typealias Failure = Errno

        let channel: IOChannel
        let offset: Int64
        let length: Int

        public func makeAsyncIterator() -> Iterator {
            Iterator(stream: ChunkStream(channel: channel, offset: offset, length: length))
        }

        /// The iterator; dropping it before the end cancels the read.
        public struct Iterator: AsyncIteratorProtocol {
            /// Each element is one delivery of the read.
            public typealias Element = DataChunk
            /// The read's error; `Errno.canceled` when the task is cancelled.
            public typealias Failure = Errno

            let stream: ChunkStream

            public mutating func next() async throws(Errno) -> DataChunk? {
                try await stream.next()
            }

            public mutating func next(isolation actor: isolated (any Actor)?) async throws(Errno) -> DataChunk? {
                try await stream.next()
            }
        }
    }
}

/// The state behind a `Chunks` iterator: the read operation, the chunks it
/// delivered that the consumer has not taken, and the consumer waiting.
final class ChunkStream: Sendable {
    private struct State {
        var operation: ChannelOperation?
        var buffer = RingBuffer<DataChunk>(initialCapacity: 4)
        /// The bytes in `buffer`.
        var buffered = 0
        var finished = false
        var error: Errno?
        var waiter: UnsafeContinuation<Result<DataChunk?, Errno>, Never>?
        /// Whether the read is of a regular file (known at its first delivery).
        var regular: Bool?
    }

    /// On a regular file, a waiting consumer is woken once this many bytes
    /// wait for it (or the read is over), not at each chunk: small chunks
    /// (a 64 KiB high-water mark) cost a wake-up per several. Half the
    /// read-ahead bound, so the read always gets there. Pipes and sockets
    /// hand each chunk over as it comes.
    static var wakeBytes: Int { IOChannel.chunkSize }

    private let channel: IOChannel
    private let offset: Int64
    private let length: Int
    private let state = Locked(State())

    init(channel: IOChannel, offset: Int64, length: Int) {
        self.channel = channel
        self.offset = offset
        self.length = length
    }

    deinit {
        // The loop ended early (or the iterator was dropped): stop reading.
        if let operation = state.withLock({ $0.operation }) { channel.core.cancel(operation) }
    }

    /// The read operation, started on first use.
    private func startIfNeeded() {
        guard state.withLock({ $0.operation == nil && !$0.finished }) else { return }
        let core = channel.core
        let options = OperationOptions(inline: true, manualCredit: true, bufferLimit: 2 * IOChannel.chunkSize)
        let operation = core.submit(direction: .read, offset: offset, length: length, data: .empty,
                                    queue: core.queue, options: options) { [weak self] done, data, error in
            self?.delivered(done: done, data: data, error: error)
        }
        state.withLock { s in
            if s.operation == nil { s.operation = operation }
        }
    }

    /// The operation's handler (inline, on the completing thread).
    private func delivered(done: Bool, data: DataChunk?, error: Errno?) {
        var handOver: (UnsafeContinuation<Result<DataChunk?, Errno>, Never>, Result<DataChunk?, Errno>)?
        var taken = 0
        let regular = state.withLock { $0.regular } ?? (channel.core.currentEntry?.isRegular ?? false)
        state.withLock { s in
            s.regular = regular
            if let data, !data.isEmpty {
                if let waiter = s.waiter, !regular || s.buffered + data.count >= Self.wakeBytes || done {
                    s.waiter = nil
                    if let first = s.buffer.popFirst() {
                        // The oldest first; this one waits its turn.
                        s.buffer.append(data)
                        s.buffered += data.count - first.count
                        handOver = (waiter, .success(first))
                        taken = first.count
                    } else {
                        handOver = (waiter, .success(data))
                        taken = data.count
                    }
                } else {
                    s.buffer.append(data)
                    s.buffered += data.count
                }
            }
            if done {
                s.finished = true
                s.error = error
                if let waiter = s.waiter {
                    s.waiter = nil
                    if let first = s.buffer.popFirst() {
                        s.buffered -= first.count
                        handOver = (waiter, .success(first))
                        taken = first.count
                    } else {
                        handOver = (waiter, error.map { .failure($0) } ?? .success(nil))
                    }
                }
            }
        }
        if taken > 0, let operation = state.withLock({ $0.operation }) { operation.release(taken) }
        if let (waiter, result) = handOver { waiter.resume(returning: result) }
    }

    func next() async throws(Errno) -> DataChunk? {
        startIfNeeded()
        let result = await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<DataChunk?, Errno>, Never>) in
                var immediate: Result<DataChunk?, Errno>?
                var taken = 0
                let operation = state.withLock { s -> ChannelOperation? in
                    if let chunk = s.buffer.popFirst() {
                        s.buffered -= chunk.count
                        immediate = .success(chunk)
                        taken = chunk.count
                    } else if s.finished {
                        immediate = s.error.map { .failure($0) } ?? .success(nil)
                        s.error = nil  // one throw; then the sequence is over
                    } else {
                        s.waiter = continuation
                    }
                    return s.operation
                }
                if taken > 0 { operation?.release(taken) }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            if let operation = state.withLock({ $0.operation }) { channel.core.cancel(operation) }
        }
        return try result.get()
    }

    /// Bytes read but not yet taken by the consumer, in flight included (for tests).
    var readAheadBytes: Int { state.withLock { $0.operation }?.readAheadBytes ?? 0 }
}

/// A bound on the writes outstanding, for `IO.copyFile`: `acquire` waits
/// while `limit` are outstanding and throws the first write error.
package final class WriteWindow: Sendable {
    private struct State {
        var outstanding = 0
        var error: Errno?
        var waiter: UnsafeContinuation<Errno?, Never>?
        var drainer: UnsafeContinuation<Void, Never>?
    }
    private let limit: Int
    private let state = Locked(State())

    package init(limit: Int) { self.limit = limit }

    package var firstError: Errno? { state.withLock { $0.error } }

    package func acquire() async throws(Errno) {
        let error = await withUnsafeContinuation { (continuation: UnsafeContinuation<Errno?, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.error != nil { return true }
                if s.outstanding < limit {
                    s.outstanding += 1
                    return true
                }
                s.waiter = continuation
                return false
            }
            if resumeNow { continuation.resume(returning: state.withLock { $0.error }) }
        }
        if let error { throw error }
    }

    package func release(_ error: Errno?) {
        let (waiter, drainer, firstError) = state.withLock { s -> (UnsafeContinuation<Errno?, Never>?, UnsafeContinuation<Void, Never>?, Errno?) in
            s.outstanding -= 1
            if s.error == nil { s.error = error }
            let waiter = s.waiter
            s.waiter = nil
            if waiter != nil && s.error == nil { s.outstanding += 1 }  // the slot passes to the waiter
            var drainer: UnsafeContinuation<Void, Never>?
            if s.outstanding == 0 {
                drainer = s.drainer
                s.drainer = nil
            }
            return (waiter, drainer, s.error)
        }
        waiter?.resume(returning: firstError)
        drainer?.resume()
    }

    /// Waits until no write is outstanding.
    package func drain() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.outstanding == 0 { return true }
                s.drainer = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }
}
