#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine

/// Ties a task's cancellation to one operation: whichever comes second,
/// the operation or the cancellation, stops the operation.
final class OperationCancellation: Sendable {
    private let state = Locked<(cancelled: Bool, operation: ChannelOperation?)>((false, nil))

    func attach(_ operation: ChannelOperation) {
        let cancelled = state.withLock { s -> Bool in
            s.operation = operation
            return s.cancelled
        }
        if cancelled { operation.channel?.cancel(operation) ?? operation.stop() }
    }

    func cancel() {
        let operation = state.withLock { s -> ChannelOperation? in
            s.cancelled = true
            return s.operation
        }
        if let operation { operation.channel?.cancel(operation) ?? operation.stop() }
    }
}

extension IOChannel {
    /// Reads `length` bytes (`Int.max`: to the end of the file) at `offset`
    /// (random channels; stream channels read at the file position) and
    /// returns them; fewer at the end of the file.
    ///
    /// The task resumes straight from the completion of the last request,
    /// without a hop through a queue. Cancelling the task cancels the read
    /// in the kernel (a read blocked on an empty pipe ends at once) and
    /// throws `Errno.canceled`; the bytes read until then are dropped.
    ///
    /// - Throws: the read's error (`EBADF`, `EISDIR`, `ECANCELED` after
    ///   `close` or cancellation, ...).
    public func read(offset: Int64 = 0, length: Int) async throws(Errno) -> DataChunk {
        let core = self.core
        let cancellation = OperationCancellation()
        let result = await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<DataChunk, Errno>, Never>) in
                let collected = Locked(DataChunk.empty)
                let operation = core.submit(direction: .read, offset: offset, length: Swift.max(length, 0),
                                            data: .empty, queue: core.queue,
                                            options: OperationOptions(inline: true)) { done, data, error in
                    if let data, !data.isEmpty { collected.withLock { $0 = $0.concat(data) } }
                    guard done else { return }
                    if let error {
                        continuation.resume(returning: .failure(error))
                    } else {
                        continuation.resume(returning: .success(collected.withLock { $0 }))
                    }
                }
                cancellation.attach(operation)
            }
        } onCancel: {
            cancellation.cancel()
        }
        return try result.get()
    }

    /// Writes `data` at `offset` (random channels; stream channels write at
    /// the file position) and returns once all of it is written.
    ///
    /// Cancelling the task cancels the write in the kernel and throws
    /// `Errno.canceled`; some bytes may have been written by then.
    ///
    /// - Throws: the write's error (`EBADF`, `ENOSPC`, `EPIPE`, ...).
    public func write(offset: Int64 = 0, data: DataChunk) async throws(Errno) {
        let core = self.core
        let cancellation = OperationCancellation()
        let result = await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<Void, Errno>, Never>) in
                let operation = core.submit(direction: .write, offset: offset, length: data.count, data: data,
                                            queue: core.queue,
                                            options: OperationOptions(inline: true)) { done, _, error in
                    guard done else { return }
                    continuation.resume(returning: error.map { .failure($0) } ?? .success(()))
                }
                cancellation.attach(operation)
            }
        } onCancel: {
            cancellation.cancel()
        }
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
            guard let fd = self.fileDescriptor?.rawValue else { return .canceled }
            while (dataOnly ? fdatasync(fd) : fsync(fd)) != 0 {
                let e = cliburing_errno()
                if e != EINTR { return Errno(rawValue: e) }
            }
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
        var finished = false
        var error: Errno?
        var waiter: UnsafeContinuation<Result<DataChunk?, Errno>, Never>?
    }

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
        state.withLock { s in
            if let data, !data.isEmpty {
                if let waiter = s.waiter {
                    s.waiter = nil
                    handOver = (waiter, .success(data))
                    taken = data.count
                } else {
                    s.buffer.append(data)
                }
            }
            if done {
                s.finished = true
                s.error = error
                if let waiter = s.waiter, s.buffer.isEmpty {
                    s.waiter = nil
                    handOver = (waiter, error.map { .failure($0) } ?? .success(nil))
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
final class WriteWindow: Sendable {
    private struct State {
        var outstanding = 0
        var error: Errno?
        var waiter: UnsafeContinuation<Errno?, Never>?
        var drainer: UnsafeContinuation<Void, Never>?
    }
    private let limit: Int
    private let state = Locked(State())

    init(limit: Int) { self.limit = limit }

    var firstError: Errno? { state.withLock { $0.error } }

    func acquire() async throws(Errno) {
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

    func release(_ error: Errno?) {
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
    func drain() async {
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
