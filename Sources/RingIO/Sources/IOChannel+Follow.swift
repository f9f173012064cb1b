#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
import RingIOChannel
@_spi(Engine) import RingIOEngine

extension IOChannel {
    /// The bytes from `offset` on, as they are written: reads to the end of
    /// the file, then waits for the file to change and reads what was
    /// added, again and again, as `tail -F` does, until the task is
    /// cancelled or the loop ends.
    ///
    /// Meant for a regular file that another process appends to (a log).
    /// At the end of the file the sequence waits on a file-system source
    /// (inotify, read through the ring), not a timer: a write is read
    /// within well under a millisecond. `pollInterval` is only a safety
    /// net (file systems whose changes inotify does not see, such as NFS
    /// writes from other machines).
    ///
    /// As `tail -F`:
    /// - a file truncated below the point reached (`> app.log`,
    ///   `truncate -s 0`) is read again from its start;
    /// - a path channel whose path comes to name another file (log
    ///   rotation: `mv app.log app.log.1` and a new `app.log`) reads the
    ///   rest of the old file, then opens the path again and reads the new
    ///   file from its start; while the path names nothing it looks again
    ///   at each event and each `pollInterval`. An fd channel follows its
    ///   open file (as `tail -f`).
    ///
    /// On a pipe or socket the end is final: use ``chunks(offset:length:)``.
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
    ///   - pollInterval: how often to look again when no event came
    ///     (default 1 s).
    /// - Returns: an `AsyncSequence` of chunks that throws `Errno.canceled`
    ///   when the task is cancelled, and the read error if a read fails.
    public func chunks(offset: Int64 = 0, follow: Bool,
                       pollInterval: Duration = .seconds(1)) -> FollowedChunks {
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

        /// The iterator: one read to the end of the file at a time, then a
        /// wait for a change.
        public struct Iterator: AsyncIteratorProtocol {
            /// Each element is one delivery of the read.
            public typealias Element = DataChunk
            /// The read's error; `Errno.canceled` when the task is cancelled.
            public typealias Failure = Errno

            var channel: IOChannel
            /// Where the next read starts (random channels only).
            var offset: Int64
            let follow: Bool
            let pollInterval: Duration
            var current: Chunks.Iterator?
            var watcher: FileWatcher?

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
                    // The end of the file, for now (or, not following, for good).
                    current = nil
                    if !follow { return nil }
                    guard let fd = channel.fileDescriptor?.rawValue else { return nil }
                    if watcher?.fd != fd {
                        // Watching from now on: what was written between the
                        // read's end and here is read once more first.
                        watcher = FileWatcher(fd: fd, engine: channel.core.engine, pollInterval: pollInterval)
                        continue
                    }
                    if try await adjust(fd) { continue }
                    guard await watcher!.wait() else { throw Errno.canceled }
                    _ = try await adjust(fd)
                }
            }

            /// At the end of the file: a truncation rewinds, a rotation
            /// reopens. True when there is something new to read at once.
            private mutating func adjust(_ fd: Int32) async throws(Errno) -> Bool {
                guard let status = try? Syscall.fstat(fd) else { return false }
                let position = channel.kind == .random ? offset : ((try? Syscall.lseek(fd, 0, SEEK_CUR)) ?? 0)
                if status.size < position {
                    // Truncated: from its start again.
                    if channel.kind == .random { offset = 0 } else { _ = try? Syscall.lseek(fd, 0, SEEK_SET) }
                    return true
                }
                // More in the file than read (written since the read ended):
                // read it before looking at the path (a rotated file's rest).
                if status.size > position { return true }
                guard let path = channel.path else { return false }
                guard let named = try? Syscall.stat(path) else { return false }  // no file there yet
                if named.inode == status.inode && named.deviceID == status.deviceID { return false }
                // Rotated: the old file is read to its end (we are there);
                // the path now names a new file, read from its start.
                guard let reopened = try? IOChannel(kind: channel.kind, path: path, mode: .readOnly,
                                                    queue: channel.core.queue, engine: channel.core.engine) else {
                    return false
                }
                channel.close()
                channel = reopened
                offset = 0
                watcher = nil
                return true
            }
        }
    }
}

/// What `chunks(follow:)` waits on at the end of a file: a file-system
/// source on its fd, and a timer as a safety net. Both wake one waiter;
/// a wake-up with no waiter stays pending (at most one).
final class FileWatcher: Sendable {
    let fd: Int32
    private let source: IOFileSystemSource
    private let timer: IOTimerSource
    private let wake = Wake()

    /// One pending wake-up and one waiter.
    final class Wake: Sendable {
        private let state = Locked<(pending: Bool, waiter: CheckedContinuation<Bool, Never>?)>((false, nil))

        func signal() {
            let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
                guard let w = s.waiter else {
                    s.pending = true
                    return nil
                }
                s.waiter = nil
                return w
            }
            waiter?.resume(returning: true)
        }

        /// True at a wake-up; false when the task is cancelled.
        func wait() async -> Bool {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                    let now = state.withLock { s -> Bool? in
                        if Task.isCancelled { return false }
                        if s.pending {
                            s.pending = false
                            return true
                        }
                        s.waiter = c
                        return nil
                    }
                    if let now { c.resume(returning: now) }
                }
            } onCancel: {
                let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
                    defer { s.waiter = nil }
                    return s.waiter
                }
                waiter?.resume(returning: false)
            }
        }
    }

    init(fd: Int32, engine: IOEngine, pollInterval: Duration) {
        self.fd = fd
        let queue = IOQueue(label: "ringio.follow")
        let wake = self.wake
        source = IOFileSystemSource(fileDescriptor: FileDescriptor(rawValue: fd),
                                    events: [.write, .extend, .attrib, .link, .delete, .rename],
                                    queue: queue, engine: engine)
        source.setEventHandler { wake.signal() }
        timer = IOTimerSource(queue: queue, engine: engine)
        timer.schedule(deadline: .now + pollInterval, repeating: pollInterval, leeway: pollInterval / 10)
        timer.setEventHandler { wake.signal() }
        source.activate()
        timer.activate()
    }

    deinit {
        source.cancel()
        timer.cancel()
    }

    /// Waits for a change (or the safety-net interval); false when the task is cancelled.
    func wait() async -> Bool { await wake.wait() }
}
