import SystemPackage
import RingIOBase
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
    /// read through a stream channel 256 KiB at a time (a regular file,
    /// each read tried on the calling thread first, straight into the
    /// storage its lines share) or as its reads deliver (a pipe or FIFO),
    /// so its size does not matter; a line may span reads. The lines of
    /// what was read are handed out without suspending.
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
        ///
        /// It hands out the lines of the chunk it holds without suspending,
        /// and awaits only for the next chunk.
        public struct AsyncIterator: AsyncIteratorProtocol {
            public typealias Element = Substring
            public typealias Failure = IOError

            /// How the bytes come: awaited reads of a regular file (each
            /// tried inline, `preadv2(RWF_NOWAIT)` on this thread, so that a
            /// cached file is read with no hop and no suspension), at an
            /// offset (a random channel) or the file position (`nil`); or the
            /// deliveries of one read, as they arrive (pipes, FIFOs, sockets,
            /// and files not known to be regular).
            enum Reader {
                case reads(offset: Int64?)
                case chunks(IOChannel.Chunks.Iterator)
            }

            /// The size of each awaited read: the largest a read tries inline.
            static let readSize = 256 << 10

            let source: Source
            var splitter: LineSplitter
            var channel: IOChannel?
            var closer: ChannelCloser?
            var reader: Reader?
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

            // Inlinable, so that a line already read costs the caller no
            // async call and no executor check: one call into the splitter.
            @inlinable
            public mutating func next(isolation actor: isolated (any Actor)?) async throws(IOError) -> Substring? {
                if let line = try nextBuffered() { return line }
                return try await nextRead(isolation: actor)
            }

            public mutating func next() async throws(IOError) -> Substring? {
                try await next(isolation: nil)
            }

            /// The next line of the chunks read so far, if any.
            @usableFromInline
            mutating func nextBuffered() throws(IOError) -> Substring? {
                do throws(LineSplitter.LineTooLong) {
                    return try splitter.next()
                } catch {
                    ended = true
                    closer = nil
                    throw IOError(.read, path: path, errno: .overflow,
                                  detail: "line \(error.line) is longer than the maximum of \(splitter.maximumLineLength) bytes")
                }
            }

            /// Reads chunks until a line is done or the input ends.
            @usableFromInline
            mutating func nextRead(isolation actor: isolated (any Actor)?) async throws(IOError) -> Substring? {
                while !ended {
                    if reader == nil {
                        do throws(IOError) {
                            try openChannel()
                        } catch {
                            ended = true  // one throw; then the sequence is over
                            throw error
                        }
                    }
                    // A cached regular file: read on this thread straight
                    // into the storage of the next block of lines (no copy).
                    if case .reads(let offset) = reader!, !Task.isCancelled {
                        let core = channel!.core
                        let read = splitter.appendReading(upTo: Self.readSize) { buffer in
                            guard case .read(let count) = core.readNow(offset: offset ?? 0, into: buffer) else { return nil }
                            return count
                        }
                        if let read {
                            if let offset { reader = .reads(offset: offset + Int64(read)) }
                            if read == 0 {
                                ended = true
                                closer = nil
                                splitter.finish()
                            }
                            if let line = try nextBuffered() { return line }
                            continue
                        }
                    }
                    let chunk: DataChunk?
                    do throws(Errno) {
                        switch reader! {
                        case .reads(let offset):
                            let read = try await channel!.read(offset: offset ?? 0, length: Self.readSize)
                            chunk = read.isEmpty ? nil : read
                            if let offset { reader = .reads(offset: offset + Int64(read.count)) }
                        case .chunks(var chunks):
                            chunk = try await chunks.next(isolation: actor)
                        }
                    } catch {
                        ended = true
                        closer = nil
                        let opening = channel?.core.pathFailure != nil
                        throw IOError(opening ? .openForReading : .read, path: path, errno: error)
                    }
                    if let chunk {
                        splitter.append(chunk)
                    } else {
                        ended = true
                        closer = nil
                        splitter.finish()
                    }
                    if let line = try nextBuffered() { return line }
                }
                return nil
            }

            private mutating func openChannel() throws(IOError) {
                let regular: Bool
                switch source {
                case .path(let path, let engine):
                    // Known regular only when its name is cached on a local
                    // file system (no wait); otherwise the chunks, which read
                    // anything.
                    regular = IO.cachedInfo(at: path, followingSymlinks: true)?.type == .regular
                    let opened = try IOChannel(kind: .stream, path: path, mode: .readOnly, queue: .global, engine: engine)
                    channel = opened
                    closer = ChannelCloser(opened)
                case .channel(let existing):
                    channel = existing
                    regular = existing.fileDescriptor.map { (try? Syscall.fstat($0.rawValue))?.type == .regular } ?? false
                }
                if regular {
                    reader = .reads(offset: channel!.kind == .random ? 0 : nil)
                } else {
                    reader = .chunks(channel!.chunks().makeAsyncIterator())
                }
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
