#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOChannel
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

/// Copies byte ranges of one open file into another through two random
/// channels: reads of `readSize` at explicit offsets, up to `maximumReads`
/// at once, each delivered chunk written at its own offset while later
/// reads run, with at most `writeWindow` bytes being written.
///
/// `progress` hears of every written chunk. With `holes`, blocks of
/// zeros (4 KiB, at 4 KiB offsets) are not written: the destination, sized
/// beforehand, keeps a hole there (`FileCopier`'s `sparse: .always`).
///
/// The channels do not close the descriptors: `run` returns once both
/// channels are closed, and the caller closes them.
// @unchecked: every `var` is touched only on `queue`, a serial IOQueue:
// by the channels' handlers, which run there, and by `start`/`cancel`,
// which hop there.
final class ChannelRangeCopy: @unchecked Sendable {
    static let readSize = 4 << 20
    static let maximumReads = 4
    static let writeWindow = 16 << 20

    private let queue = IOQueue(label: "ringio.copy")
    private let reader: IOChannel
    private let writer: IOChannel
    private let progress: @Sendable (Int) -> Void
    private let holes: Bool
    private var pending: [Range<Int64>]
    private var readsInFlight = 0
    private var bytesBeingWritten = 0
    private var failure: IOError?
    /// Where the source ended early (it shrank under the copy), if it did.
    private(set) var endedAt: Int64?
    private let closed: Closed
    private var finished = false
    private var continuation: CheckedContinuation<IOError?, Never>?

    /// - Parameter regions: the byte ranges to copy, in order (the source's
    ///   data segments, for a sparse file).
    /// - Parameter direct: both channels use O_DIRECT where the file systems
    ///   allow it (`destination` must then be open for reading too: a partial
    ///   last block is read, merged and written).
    init(source: FileDescriptor, destination: FileDescriptor, regions: [Range<Int64>], direct: Bool = false,
         holes: Bool = false, engine: IOEngine = .shared, progress: @escaping @Sendable (Int) -> Void = { _ in }) {
        self.progress = progress
        self.holes = holes
        var chunks: [Range<Int64>] = []
        for region in regions {
            var offset = region.lowerBound
            while offset < region.upperBound {
                let end = min(offset + Int64(Self.readSize), region.upperBound)
                chunks.append(offset..<end)
                offset = end
            }
        }
        pending = chunks.reversed()  // popLast takes them in order
        // Both channels' cleanups run on `queue` once every handler of the fd has returned.
        let closed = Closed()
        self.closed = closed
        let cleanup: @Sendable (Errno?) -> Void = { _ in closed.arrive() }
        reader = IOChannel(kind: .random, fileDescriptor: source, queue: queue, engine: engine, cleanup: cleanup)
        writer = IOChannel(kind: .random, fileDescriptor: destination, queue: queue, engine: engine, cleanup: cleanup)
        if direct {
            reader.setDirectIO(.preferred)
            writer.setDirectIO(.preferred)
        }
        reader.setHighWater(IOChannel.chunkSize)
    }

    /// Copies everything; on task cancellation stops both channels and
    /// fails with `ECANCELED`. Returns once both channels are closed, so
    /// that the caller may close the descriptors.
    func run() async throws(IOError) {
        let failure = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<IOError?, Never>) in
                queue.async { [self] in
                    // A cancellation may have come first and finished the copy already.
                    self.continuation = continuation
                    if finished { resumeIfClosed() } else { pump() }
                }
            }
        } onCancel: { [self] in
            queue.async { [self] in fail(IOError(.read, path: nil, side: .source, errno: .canceled)) }
        }
        if let failure { throw failure }
    }

    /// On `queue`: starts reads while the windows allow, and finishes when all is done.
    private func pump() {
        while failure == nil && readsInFlight < Self.maximumReads && bytesBeingWritten < Self.writeWindow,
              let range = pending.popLast() {
            readsInFlight += 1
            startRead(range)
        }
        if readsInFlight == 0 && bytesBeingWritten == 0 && (pending.isEmpty || failure != nil) {
            finish()
        }
    }

    private func startRead(_ range: Range<Int64>) {
        let cursor = Cursor(range.lowerBound)
        reader.read(offset: range.lowerBound, length: Int(range.count), queue: queue) { [self] done, data, error in
            if let data, !data.isEmpty, failure == nil {
                self.write(data, at: cursor.next)
                cursor.next += Int64(data.count)
            }
            let next = cursor.next
            if let error {
                fail(IOError(.read, path: nil, side: .source, errno: error))
            } else if done && next < range.upperBound {
                // EOF inside the range: the source shrank under the copy.
                endedAt = min(endedAt ?? next, next)
                pending.removeAll()
            }
            if done {
                readsInFlight -= 1
                pump()
            }
        }
    }

    private func write(_ data: DataChunk, at offset: Int64) {
        guard holes else { return writeRun(data, at: offset) }
        // Runs of blocks that are not all zeros; the rest stays a hole.
        let block = 4096
        var start: Int?
        var position = 0
        while position < data.count {
            let end = Swift.min(position + block, data.count)
            let zero = data.subrange(position..<end).apply { _, _, bytes in bytes.allSatisfy { $0 == 0 } }
            if zero, let from = start {
                writeRun(data.subrange(from..<position), at: offset + Int64(from))
                start = nil
            } else if !zero && start == nil {
                start = position
            }
            if zero { progress(end - position) }
            position = end
        }
        if let from = start { writeRun(data.subrange(from..<data.count), at: offset + Int64(from)) }
    }

    private func writeRun(_ data: DataChunk, at offset: Int64) {
        bytesBeingWritten += data.count
        let count = data.count
        writer.write(offset: offset, data: data, queue: queue) { [self] done, _, error in
            guard done else { return }
            bytesBeingWritten -= count
            if let error {
                fail(IOError(.write, path: nil, side: .destination, errno: error))
            } else {
                progress(count)
            }
            pump()
        }
    }

    private func fail(_ error: IOError) {
        guard failure == nil, !finished else { return }
        failure = error
        pending.removeAll()
        reader.close(stop: true)
        writer.close(stop: true)
        pump()
    }

    /// Closes both channels; resumes the caller once their cleanups ran.
    private func finish() {
        guard !finished else { return }
        finished = true
        closed.whenBoth { [self] in resumeIfClosed() }
        reader.close()
        writer.close()
    }

    /// On `queue`: once finished and both channels are closed, resumes the caller (once).
    private func resumeIfClosed() {
        guard finished, closed.both, let continuation else { return }
        self.continuation = nil
        continuation.resume(returning: failure)
    }

    /// Where a read's next delivered byte goes.
    // @unchecked: used only by one read's handler, which runs on the copy's serial queue.
    private final class Cursor: @unchecked Sendable {
        var next: Int64
        init(_ next: Int64) { self.next = next }
    }

    /// Counts the two channels' cleanups, then runs `action`.
    // @unchecked: used only on the copy's serial queue (cleanups run there,
    // and `finish` does).
    private final class Closed: @unchecked Sendable {
        private var count = 0
        private var action: (() -> Void)?

        var both: Bool { count == 2 }

        func arrive() {
            count += 1
            if count == 2 { action?() }
        }

        func whenBoth(_ action: @escaping () -> Void) {
            if count == 2 { action() } else { self.action = action }
        }
    }
}

/// `SEEK_DATA` and `SEEK_HOLE`: Linux's values (glibc declares them only under _GNU_SOURCE).
private let seekData: Int32 = 3
private let seekHole: Int32 = 4

/// The data segments of a file (SEEK_DATA / seekHole), or the whole file
/// when it has no holes or the file system cannot say.
func dataRegions(of fd: FileDescriptor, size: Int64, mayBeSparse: Bool) -> [Range<Int64>] {
    guard size > 0 else { return [] }
    guard mayBeSparse else { return [0..<size] }
    var regions: [Range<Int64>] = []
    var offset: Int64 = 0
    while offset < size {
        let data: Int64
        do throws(Errno) { data = try Syscall.lseek(fd.rawValue, offset, seekData) } catch {
            if error == .noSuchAddressOrDevice { break }  // only a hole is left
            return [0..<size]  // not supported: copy it all
        }
        let hole = (try? Syscall.lseek(fd.rawValue, data, seekHole)) ?? size
        let end = min(hole, size)
        if end > data { regions.append(data..<end) }
        offset = end
    }
    return regions
}
