import SystemPackage
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine
import RingIOChannel

extension IO {
    /// The longest line `lines(at:)` and `IOChannel.lines()` accept unless
    /// told otherwise: 1 MiB.
    public static let defaultMaximumLineLength = 1 << 20

    /// The lines of the file at `path`, read with backpressure.
    ///
    /// A line ends at `\n` or `\r\n`, which are not part of it; a last line
    /// without a newline is a line; an empty file has none. Bytes that are
    /// not UTF-8 become U+FFFD, as with `String(decoding:as:)`. The file is
    /// read through a stream channel a chunk at a time, so its size does
    /// not matter; a line may span chunks.
    ///
    /// ```swift
    /// var count = 0
    /// for try await line in IO.lines(at: "/etc/passwd") where !line.hasPrefix("#") {
    ///     count += 1
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - path: the file; a relative path is resolved against the current
    ///     directory when the iteration starts.
    ///   - maximumLineLength: the longest line accepted, in bytes (default
    ///     ``defaultMaximumLineLength``): a longer one ends the iteration
    ///     with `EOVERFLOW`, after the lines before it, rather than hold an
    ///     unbounded line (a file with no newline) in memory.
    ///   - engine: the engine that reads.
    /// - Returns: an `AsyncSequence` of `Substring`; its iteration throws an
    ///   ``IOError``: `.openForReading` (`ENOENT`, `EACCES`), `.read` (the
    ///   read's error; `EOVERFLOW` for a line past the maximum, naming its
    ///   number; `ECANCELED` when the task is cancelled).
    public static func lines(at path: FilePath, maximumLineLength: Int = defaultMaximumLineLength,
                             engine: IOEngine = .shared) -> Lines {
        Lines(source: .path(path, engine), maximumLineLength: maximumLineLength)
    }

    /// The lines of a file or channel (`IO.lines(at:)`, `IOChannel.lines()`).
    ///
    /// Each iteration reads anew (from the start of a file; from the
    /// channel's current position of a stream channel). Leaving the loop
    /// stops the read.
    public struct Lines: AsyncSequence, Sendable {
        /// One line, without its `\n` or `\r\n`; it shares its storage with
        /// the lines read with it.
        public typealias Element = Substring
        public typealias Failure = IOError

        enum Source: Sendable {
            case path(FilePath, IOEngine)
            case channel(IOChannel)
        }

        let source: Source
        let maximumLineLength: Int

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(source: source, splitter: LineSplitter(maximumLineLength: maximumLineLength))
        }

        /// The iterator; dropping it stops the read.
        public struct AsyncIterator: AsyncIteratorProtocol {
            public typealias Element = Substring
            public typealias Failure = IOError

            let source: Source
            var splitter: LineSplitter
            var channel: IOChannel?
            var closer: ChannelCloser?
            var chunks: IOChannel.Chunks.Iterator?
            var lines: [Substring] = []
            var index = 0
            var ended = false

            init(source: Source, splitter: LineSplitter) {
                self.source = source
                self.splitter = splitter
            }

            var path: FilePath? {
                switch source {
                case .path(let path, _): return path
                case .channel(let channel): return channel.path
                }
            }

            public mutating func next(isolation actor: isolated (any Actor)?) async throws(IOError) -> Substring? {
                while index == lines.count {
                    if ended { return nil }
                    lines.removeAll(keepingCapacity: true)
                    index = 0
                    try await fill(isolation: actor)
                }
                defer { index += 1 }
                return lines[index]
            }

            public mutating func next() async throws(IOError) -> Substring? {
                try await next(isolation: nil)
            }

            /// Reads chunks until at least one line is done or the input ends.
            private mutating func fill(isolation actor: isolated (any Actor)?) async throws(IOError) {
                if chunks == nil { try openChannel() }
                while lines.isEmpty {
                    let chunk: DataChunk?
                    do throws(Errno) {
                        chunk = try await chunks!.next(isolation: actor)
                    } catch {
                        let opening = channel?.core.pathFailure != nil
                        throw IOError(opening ? .openForReading : .read, path: path, errno: error)
                    }
                    guard let chunk else {
                        ended = true
                        closer = nil
                        if let last = splitter.finish() { lines.append(last) }
                        return
                    }
                    do throws(LineSplitter.LineTooLong) {
                        try splitter.split(chunk, into: &lines)
                    } catch {
                        ended = true
                        closer = nil
                        throw IOError(.read, path: path, errno: .overflow,
                                      detail: "line \(error.line) is longer than the maximum of \(splitter.maximumLineLength) bytes")
                    }
                }
            }

            private mutating func openChannel() throws(IOError) {
                switch source {
                case .path(let path, let engine):
                    let opened = try IOChannel(kind: .stream, path: path, mode: .readOnly, queue: .global, engine: engine)
                    channel = opened
                    closer = ChannelCloser(opened)
                case .channel(let existing):
                    channel = existing
                }
                chunks = channel!.chunks().makeAsyncIterator()
            }
        }
    }
}

/// Closes a channel `lines(at:)` opened when its iterator goes away.
final class ChannelCloser: Sendable {
    let channel: IOChannel
    init(_ channel: IOChannel) { self.channel = channel }
    deinit { channel.close() }
}

extension IOChannel {
    /// The lines of this channel's file, from its start (a random-access
    /// channel) or its current position (a stream channel) to its end.
    ///
    /// See ``IO/lines(at:maximumLineLength:engine:)`` for what a line is.
    /// The channel stays open after the iteration.
    ///
    /// - Parameter maximumLineLength: the longest line accepted, in bytes.
    /// - Returns: an `AsyncSequence` of `Substring`.
    public func lines(maximumLineLength: Int = IO.defaultMaximumLineLength) -> IO.Lines {
        IO.Lines(source: .channel(self), maximumLineLength: maximumLineLength)
    }
}
