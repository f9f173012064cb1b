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

/// The engine paths of `IO.readFile` for a small file: one linked chain
/// (open → read → install → close), or, for an fd the calling thread
/// already opened, a read linked to its close. See SmallFileRead.swift.
extension SmallFileRead {
    /// The chain's read asks for this many bytes: a file up to one byte less
    /// is read by the chain alone; a larger one takes one more read.
    static let guess = 64 << 10

    /// The results of a chain's first three requests, read by the last one's
    /// completion.
    // @unchecked: the completions of one chain run one after another on one
    // thread (the ring thread, or the pool worker that runs the chain), and
    // only they touch these fields.
    private final class ChainResults: @unchecked Sendable {
        var open: Int32 = -ECANCELED
        var read: Int32 = -ECANCELED
        /// The installed fd, or -errno (`EMFILE`).
        var fd: Int32 = -ECANCELED
    }

    /// `maximumSize + 1` without overflowing.
    @inline(__always)
    static func plusOne(_ maximumSize: Int) -> Int { maximumSize == .max ? .max : maximumSize + 1 }

    /// One linked chain: open the path into a direct descriptor, read up to
    /// `guess` bytes, install a plain fd for the completion, close the
    /// direct descriptor. `completion` runs once, on the engine's thread,
    /// after the close; `noSlot` says the ring's file table had no free slot
    /// (nothing was opened: the caller takes another path).
    static func startChain(_ path: FilePath, maximumSize: Int, engine: IOEngine,
                           _ completion: @escaping @Sendable (Outcome, _ noSlot: Bool) -> Void) {
        let capacity = Swift.min(guess, plusOne(maximumSize))
        let memory = RequestMemory(paths: [path])
        let file = ChainedFile()
        let results = ChainResults()
        let base = malloc(capacity)!
        // The address only: the last completion owns the bytes.
        let address = UInt(bitPattern: base)
        let open = IORequest(.openChained(directory: AT_FDCWD, path: memory.paths[0], flags: O_RDONLY | O_NONBLOCK,
                                          mode: 0, file: file), owner: memory) { results.open = $0 }
        let read = IORequest(.readChained(file: file, buffer: UnsafeMutableRawBufferPointer(start: base, count: capacity),
                                          offset: 0)) { results.read = $0 }
        let install = IORequest(.installChained(file: file)) { results.fd = $0 }
        let close = IORequest(.closeChained(file: file)) { _ in
            let base = UnsafeMutableRawPointer(bitPattern: address)!
            guard results.open >= 0 else {
                free(base)
                if results.fd >= 0 { Syscall.closeIgnoringErrors(results.fd) }
                return completion(.failed(IOError(.openForReading, path: path, errno: Errno(rawValue: -results.open))),
                                  file.noSlot)
            }
            if let outcome = opened(fd: results.fd, read: results.read, base: base, capacity: capacity, path,
                                    maximumSize: maximumSize, engine: engine, completion: { completion($0, false) }) {
                completion(outcome, false)
            }
        }
        // The read's and the install's links are hard: a short or failed read
        // (a directory: EISDIR) still gets its fd installed and its slot closed.
        engine.submit(linked: [open, read, install, close], hardLinks: [1, 2])
    }

    /// The chain's file is open as `fd` (or the install failed: -errno) and its
    /// first read gave `read`. Returns the outcome, or `nil` when more reads
    /// were submitted (whose last completion calls `completion`).
    private static func opened(fd: Int32, read: Int32, base: UnsafeMutableRawPointer, capacity: Int, _ path: FilePath,
                               maximumSize: Int, engine: IOEngine,
                               completion: @escaping @Sendable (Outcome) -> Void) -> Outcome? {
        guard fd >= 0 else {
            free(base)
            // Without the fd nothing says what the bytes came from: only
            // when none were taken can the channel path start afresh.
            return read > 0 ? .failed(IOError(.read, path: path, errno: Errno(rawValue: -fd))) : .general
        }
        let st = try? Syscall.fstat(fd)
        let regular = st?.type == .regular
        if read > 0 && Int(read) > maximumSize {
            Syscall.closeIgnoringErrors(fd)
            free(base)
            return tooLarge(path, maximumSize)
        }
        guard let st, regular && read >= 0 && Int(st.size) <= limit else {
            if read <= 0 || regular {
                // Nothing taken (a FIFO without data, a directory, a device that
                // gave nothing), or a large regular file: the channel path,
                // which opens it again as a blocking open would.
                Syscall.closeIgnoringErrors(fd)
                free(base)
                return .general
            }
            // Bytes taken from a FIFO or a device: the rest comes from the same
            // fd, now blocking, through a channel.
            if let flags = try? Syscall.fcntl(fd, F_GETFL) { _ = try? Syscall.fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) }
            return .partial(chunk(base, count: Int(read)), fd: fd)
        }
        let n = Int(read)
        let size = Int(st.size)
        // A short read of a regular file is its end, unless it says it has 0
        // bytes and gave some (procfs): then read on until a read gives 0.
        if n < capacity && (size > 0 || n == 0) {
            Syscall.closeIgnoringErrors(fd)
            return .done(chunk(base, count: n))
        }
        readOn(fd: fd, base: base, capacity: capacity, count: n, size: size, path, maximumSize: maximumSize,
               engine: engine, completion)
        return nil
    }

    /// More reads of a regular file at `count`, until one is short (or gives
    /// 0 where the size said 0); the buffer grows to the size + 1, else doubles.
    private static func readOn(fd: Int32, base: UnsafeMutableRawPointer, capacity: Int, count: Int, size: Int,
                               _ path: FilePath, maximumSize: Int, engine: IOEngine,
                               _ completion: @escaping @Sendable (Outcome) -> Void) {
        var capacity = capacity
        var base = base
        if count == capacity {
            capacity = Swift.min(Swift.max(capacity * 2, size + 1), plusOne(maximumSize))
            base = realloc(base, capacity)!
        }
        let address = UInt(bitPattern: base)
        let grown = capacity
        let request = IORequest(.read(fd: fd, buffer: UnsafeMutableRawBufferPointer(start: base + count,
                                                                                    count: capacity - count),
                                      offset: Int64(count))) { res in
            let base = UnsafeMutableRawPointer(bitPattern: address)!
            guard res >= 0 else {
                Syscall.closeIgnoringErrors(fd)
                free(base)
                return completion(.failed(IOError(.read, path: path, errno: Errno(rawValue: -res))))
            }
            let total = count + Int(res)
            if total > maximumSize {
                Syscall.closeIgnoringErrors(fd)
                free(base)
                return completion(tooLarge(path, maximumSize))
            }
            if res == 0 || (total < grown && size > 0) {
                Syscall.closeIgnoringErrors(fd)
                return completion(.done(chunk(base, count: total)))
            }
            readOn(fd: fd, base: base, capacity: grown, count: total, size: size, path, maximumSize: maximumSize,
                   engine: engine, completion)
        }
        engine.submit(request)
    }

    /// A regular file of `size` bytes the calling thread opened (its path was
    /// cached, its bytes not): one read of `size + 1` bytes linked to the
    /// close, one submission; `completion` runs once, after the close.
    static func readOpened(fd: Int32, size: Int, _ path: FilePath, engine: IOEngine) async -> Outcome {
        await withUnsafeContinuation { continuation in
            let capacity = size + 1
            let base = malloc(capacity)!
            let address = UInt(bitPattern: base)
            let read = ReadResult()
            let first = IORequest(.read(fd: fd, buffer: UnsafeMutableRawBufferPointer(start: base, count: capacity),
                                        offset: 0)) { read.value = $0 }
            let close = IORequest(.close(fd: fd)) { closed in
                // Cancelled before it ran (the engine shut down): the fd is still open.
                if closed == -ECANCELED { Syscall.closeIgnoringErrors(fd) }
                let base = UnsafeMutableRawPointer(bitPattern: address)!
                let res = read.value
                guard res >= 0, Int(res) <= size else {
                    free(base)
                    // An error, or more bytes than the stat said (it grew): the channel path.
                    return continuation.resume(returning: res < 0 && res != -ECANCELED
                        ? .failed(IOError(.read, path: path, errno: Errno(rawValue: -res))) : .general)
                }
                continuation.resume(returning: .done(chunk(base, count: Int(res))))
            }
            engine.submit(linked: [first, close], hardLinks: [0])
        }
    }

    /// A read's result for one completion to hand to the next of its chain.
    // @unchecked: written by one completion and read by the next of the same
    // chain, which run one after another on one thread.
    private final class ReadResult: @unchecked Sendable {
        var value: Int32 = -ECANCELED
    }

    /// The first `count` bytes at `base` (malloc'd) as a chunk that frees
    /// them; a buffer much larger than its bytes is shrunk first.
    private static func chunk(_ base: UnsafeMutableRawPointer, count: Int) -> DataChunk {
        guard count > 0 else {
            free(base)
            return .empty
        }
        let bytes = count <= guess / 2 ? (realloc(base, count) ?? base) : base
        return DataChunk(bytesNoCopy: UnsafeRawBufferPointer(start: bytes, count: count), deallocator: .free)
    }

    private static func tooLarge(_ path: FilePath, _ maximumSize: Int) -> Outcome {
        .failed(IOError(.read, path: path, errno: .fileTooLarge, detail: "more than the maximum size of \(maximumSize) bytes"))
    }
}
