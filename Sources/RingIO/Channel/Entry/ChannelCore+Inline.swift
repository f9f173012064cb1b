#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

// An awaited `read` or `write` of a regular file, carried out on the
// caller's thread before any suspension: no operation, no continuation, no
// hop. It runs only when it would start at once if queued (nothing ahead of
// it on the fd: `EntryScheduler.beginInline`), and what is queued behind it
// meanwhile (a barrier, the next stream operation) waits for it, so the
// order and position rules are those of a queued operation.
extension ChannelCore {
    /// The largest awaited write done on the caller's thread. A buffered
    /// `write(2)` cannot be tried without blocking on this kernel
    /// (`pwritev2(RWF_NOWAIT)` of a buffered write fails with `EOPNOTSUPP` on
    /// ext4 and tmpfs), so this is a plain write, as `FileHandle` does: 4 KiB
    /// took 3.9 µs at the median here and 12.9 µs at p99, but 8 ms at
    /// p99.9 and up to 42 ms when the kernel throttled dirty pages
    /// (Benchmarks/results/natural-path.md). Small writes only: a large one
    /// goes to the engine, several requests in flight.
    static var maxInlineWrite: Int { 64 << 10 }

    /// What an awaited read tried on the caller's thread came to.
    enum InlineRead {
        /// Done: the bytes (fewer at the end of the file).
        case read(DataChunk)
        /// Submit it as usual; `skipInlineTry`: its first page is not
        /// cached, the operation need not ask again.
        case submit(skipInlineTry: Bool)
    }

    /// An awaited read tried on this thread: the bytes, when the page cache
    /// holds all of them (or they reach the end of the file); else it must
    /// be submitted as usual (not a regular file, pages not cached, a file
    /// system that refuses `RWF_NOWAIT`, any error, which the engine then
    /// reports as it always did). A stream channel's position moves only
    /// when the read is done here.
    func readNow(offset: Int64, length: Int) -> InlineRead {
        guard length > 0, length <= ChannelOperation.maxInlineRead else { return .submit(skipInlineTry: false) }
        if length <= SmallBlocks.size {
            // A 4 KiB block, and the chunk's one leaf owns it; in a read
            // loop the thread's last leaf, once its chunk is gone: no
            // allocation, no lock.
            var small: DataChunk.SmallRead?
            let count = readNow(offset: offset, length: length) {
                let memory = DataChunk.SmallRead(length: length)
                small = memory
                return memory.pointer
            }
            switch count {
            case .read(let total):
                return .read(small!.chunk(count: total))
            case .submit(let skipInlineTry):
                small?.giveBack()
                return .submit(skipInlineTry: skipInlineTry)
            }
        }
        var buffer: ReadBuffer?
        let count = readNow(offset: offset, length: length) {
            let made = ReadBuffer(capacity: length, pool: BufferPool.shared)
            buffer = made
            return made.pointer
        }
        switch count {
        case .read(let total): return .read(buffer!.chunk(count: total))
        case .submit(let skipInlineTry): return .submit(skipInlineTry: skipInlineTry)
        }
    }

    /// What a read tried on this thread into the caller's memory came to.
    package enum InlineReadInto {
        /// Done: this many bytes (fewer at the end of the file).
        case read(Int)
        /// Nothing was read; submit it as usual (see `InlineRead.submit`).
        case submit(skipInlineTry: Bool)
    }

    /// `readNow(offset:length:)` into `destination` (at most 256 KiB), with
    /// the same rules: `.read` when the page cache held all of it (or it
    /// reached the end of the file), else `.submit` and the bytes written
    /// to `destination` mean nothing. For a reader that owns the memory the
    /// bytes end in (`IO.lines` reads into its strings' storage).
    package func readNow(offset: Int64, into destination: UnsafeMutableRawBufferPointer) -> InlineReadInto {
        guard let base = destination.baseAddress, destination.count <= ChannelOperation.maxInlineRead else {
            return .submit(skipInlineTry: false)
        }
        return readNow(offset: offset, length: destination.count) { base }
    }

    /// A handler read of a random channel (at most 256 KiB, delivered in
    /// one call by the channel's settings) tried on this thread: `.read`
    /// when the page cache held every byte; its handler call is then queued
    /// on `queue` as the operation's only call, `(true, data, nil)`, and
    /// counts as the operation's outstanding handler until it returns. No
    /// operation object, no trip through the engine: one hop, to `queue`.
    /// `.submit`: nothing was delivered; submit it as usual.
    func readNow(offset: Int64, length: Int, queue: IOQueue,
                 handler: @escaping IOChannel.Handler) -> InlineReadInto {
        guard kind == .random, length > 0, length <= ChannelOperation.maxInlineRead else {
            return .submit(skipInlineTry: false)
        }
        var buffer: ReadBuffer?
        return readNow(offset: offset, length: length, handler: true) {
            let made = ReadBuffer(capacity: length, pool: BufferPool.shared)
            buffer = made
            return made.pointer
        } deliver: { entry, total in
            // Fewer bytes (the end of the file): the usual way, which knows
            // how such a read ends.
            guard total == length else { return false }
            let chunk = buffer!.chunk(count: total)
            queue.async { [self] in
                handler(true, chunk, nil)
                entry.operationHandlersReturned()
                operationLeftEntry()
            }
            return true
        }
    }

    /// The read of `readNow`, into the memory `destination` gives (asked
    /// for only once the read may run here). `handler`: a handler read,
    /// whose `deliver` queues its handler call (before the read ends on the
    /// entry, so that on one serial queue what starts after it calls its
    /// handler after it) or returns false to send it the usual way.
    @inline(__always)
    private func readNow(offset: Int64, length: Int, handler: Bool = false,
                         _ destination: () -> UnsafeMutableRawPointer,
                         deliver: (FDEntry, Int) -> Bool = { _, _ in true }) -> InlineReadInto {
        guard length > 0 else { return .submit(skipInlineTry: false) }
        let stream = kind == .stream
        guard stream || (offset >= 0 && offset <= Int64.max - Int64(length)) else { return .submit(skipInlineTry: false) }
        #if DEBUG
        // Faults are injected on the engine's way: tests that inject them
        // must see every operation go there.
        if engine.faults.hasRules { return .submit(skipInlineTry: false) }
        #endif
        // A stream read of an O_APPEND fd goes the usual way (its position
        // rule is the engine's).
        guard let (entry, base) = beginInline(isWrite: false, handlerLength: handler ? length : nil,
                                              { $0.mayReadInline && !(stream && $0.appendMode) }) else {
            return .submit(skipInlineTry: false)
        }
        var delivered = false
        defer {
            entry.endInline(stream: stream, isWrite: false, handlerDropped: handler && !delivered)
            releaseUnderPressure()
        }
        guard stream || base <= Int64.max - offset - Int64(length) else { return .submit(skipInlineTry: false) }
        let start = stream ? -1 : base + offset
        let buffer = destination()
        var total = 0
        while total < length {
            do {
                let n = try Syscall.preadNowait(entry.fd,
                                                into: UnsafeMutableRawBufferPointer(start: buffer + total,
                                                                                    count: length - total),
                                                at: stream ? -1 : start + Int64(total))
                entry.learnNoWait(supported: true)
                if n == 0 { break }  // the end of the file
                total += n
            } catch {
                entry.inlineReadFailed(error)
                // Not all cached: as if it had not been tried (a stream's
                // position goes back), and the operation reads it all (the
                // cached part inline again, in its turn: a barrier queued
                // meanwhile may stand between the two parts).
                if stream && total > 0 { _ = try? Syscall.lseek(entry.fd, -Int64(total), SEEK_CUR) }
                return .submit(skipInlineTry: total == 0 && error == .resourceTemporarilyUnavailable)
            }
        }
        guard deliver(entry, total) else { return .submit(skipInlineTry: false) }
        delivered = true
        entry.inlineReads.wrappingAdd(1, ordering: .relaxed)
        if handler {
            entry.handlerInline.wrappingAdd(1, ordering: .relaxed)
        } else {
            entry.awaitedInline.wrappingAdd(1, ordering: .relaxed)
        }
        return .read(total)
    }

    /// An awaited write done on this thread (a `write(2)`, or `pwrite` on a
    /// random channel, until every byte is written): `nil` when it must be
    /// submitted as usual (not a regular file, larger than
    /// `maxInlineWrite`, in more than one region, something ahead of it);
    /// else the write's error, if any (the bytes before it are in the
    /// file, and a stream channel's position follows them).
    func writeNow(offset: Int64, data: DataChunk) -> Result<Void, Errno>? {
        let length = data.count
        guard length > 0, length <= Self.maxInlineWrite, data.regionCount == 1 else { return nil }
        let stream = kind == .stream
        guard stream || (offset >= 0 && offset <= Int64.max - Int64(length)) else { return nil }
        #if DEBUG
        if engine.faults.hasRules { return nil }
        #endif
        guard let (entry, base) = beginInline(isWrite: true, { $0.kind == .regular && $0.directAlignment == nil }) else {
            return nil
        }
        defer {
            entry.endInline(stream: stream, isWrite: true)
            releaseUnderPressure()
        }
        guard stream || base <= Int64.max - offset - Int64(length) else { return nil }
        let start = base + offset
        entry.awaitedInline.wrappingAdd(1, ordering: .relaxed)
        return data.withUnsafeBytes { bytes -> Result<Void, Errno> in
            var written = 0
            while written < length {
                let rest = UnsafeRawBufferPointer(rebasing: bytes[written...])
                do throws(Errno) {
                    let n = stream ? try Syscall.write(entry.fd, from: rest)
                                   : try Syscall.pwrite(entry.fd, from: rest, at: start + Int64(written))
                    // (A regular file's write of at least a byte writes one
                    // or fails; zero would loop forever.)
                    if n <= 0 { return .failure(.ioError) }
                    written += n
                } catch {
                    return .failure(error)
                }
            }
            return .success(())
        }
    }
}
