import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

extension IOChannel {
    /// The bytes from `offset` on, as they are written: reads to the end of
    /// the file, waits `pollInterval`, and reads what was added since, again
    /// and again, as `tail -f` does, until the task is cancelled or the loop
    /// ends.
    ///
    /// Meant for a regular file that another process appends to (a log).
    /// Each poll at the end of the file is one read that returns nothing;
    /// a file that shrinks is not noticed (reading resumes once it grows
    /// past where this sequence had got to). On a pipe or socket, the end is
    /// final: use ``chunks(offset:length:)``.
    ///
    /// ```swift
    /// let log = try IOChannel(kind: .stream, path: "/var/log/app.log", mode: .readOnly, queue: .global)
    /// for try await chunk in log.chunks(follow: true) {
    ///     print(String(decoding: chunk, as: UTF8.self), terminator: "")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - offset: where to start (random channels; stream channels read at
    ///     the file position).
    ///   - follow: `true` to keep reading as the file grows; `false` ends
    ///     the sequence at the end of the file, as ``chunks(offset:length:)``
    ///     does.
    ///   - pollInterval: how long to wait at the end of the file before
    ///     looking again (default 100 ms).
    /// - Returns: an `AsyncSequence` of chunks that throws `Errno.canceled`
    ///   when the task is cancelled, and the read error if a read fails.
    public func chunks(offset: Int64 = 0, follow: Bool,
                       pollInterval: Duration = .milliseconds(100)) -> FollowedChunks {
        FollowedChunks(channel: self, offset: offset, follow: follow, pollInterval: pollInterval)
    }

    /// The chunks of a growing file: see ``chunks(offset:follow:pollInterval:)``.
    public struct FollowedChunks: AsyncSequence, Sendable {
        /// Each element is one delivery of the read.
        public typealias Element = DataChunk
        /// The read's error; `Errno.canceled` when the task is cancelled.
        public typealias Failure = Errno

        let channel: IOChannel
        let offset: Int64
        let follow: Bool
        let pollInterval: Duration

        public func makeAsyncIterator() -> Iterator {
            Iterator(channel: channel, offset: offset, follow: follow, pollInterval: pollInterval)
        }

        /// The iterator: one read to the end of the file at a time, then a wait.
        public struct Iterator: AsyncIteratorProtocol {
            /// Each element is one delivery of the read.
            public typealias Element = DataChunk
            /// The read's error; `Errno.canceled` when the task is cancelled.
            public typealias Failure = Errno

            let channel: IOChannel
            /// Where the next read starts (random channels only).
            var offset: Int64
            let follow: Bool
            let pollInterval: Duration
            var current: Chunks.Iterator?

            init(channel: IOChannel, offset: Int64, follow: Bool, pollInterval: Duration) {
                self.channel = channel
                self.offset = offset
                self.follow = follow
                self.pollInterval = pollInterval
            }

            public mutating func next() async throws(Errno) -> DataChunk? {
                while true {
                    var reading = current ?? channel.chunks(offset: offset).makeAsyncIterator()
                    if let chunk = try await reading.next() {
                        current = reading
                        if channel.kind == .random { offset += Int64(chunk.count) }
                        return chunk
                    }
                    // The end of the file, for now: look again after a while
                    // (or, not following, the end of the sequence).
                    current = nil
                    if !follow { return nil }
                    do {
                        try await Task.sleep(for: pollInterval)
                    } catch {
                        throw Errno.canceled
                    }
                }
            }
        }
    }
}
