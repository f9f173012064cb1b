#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import Synchronization
import RingIOBase
@_spi(Engine) import RingIOEngine

/// The small-file path of `IO.readFile`: an open, then one read of the
/// whole file, the second submitted from the first one's completion on the
/// engine's thread; the caller resumes once, from the read's completion.
///
/// ```
///  caller             engine thread (ring thread, or a pool worker)
///  ──────             ─────────────────────────────────────────────
///  openat ─────────▶  fd: fstat; a regular file of 1 ... 256 KiB?
///                        │ yes: read size + 1 bytes at offset 0 ──▶ (next io_uring_enter)
///                        │ no:  close; the channel path             │
///  resumes ◀────────  close; the bytes (a short read is the end) ◀──┘
/// ```
///
/// From a task on the engine's queue (`IOEngine.queue`) nothing crosses a
/// thread: both requests are submitted from the ring thread, without an
/// eventfd write, and the task resumes there. Two `io_uring_enter` calls
/// per file.
///
/// Not one linked chain (open → statx → read → close): the read needs the
/// open's fd and the file's size, and io_uring runs `STATX` on its worker
/// threads (a kernel thread wake-up each), where `fstat` of the open fd on
/// the completion's thread costs well under a microsecond. The open uses
/// `O_NONBLOCK` so that it never waits (a FIFO without a writer); anything
/// but a regular file goes to the channel path, which opens it again.
enum SmallFileRead {
    /// Files above this size, or of size 0 (procfs reports 0 and has bytes),
    /// take the channel path.
    static let limit = 256 << 10

    enum Outcome: Sendable {
        case done(DataChunk)
        case failed(IOError)
        /// Not a regular file of 1 ... `limit` bytes, or it grew since the
        /// stat: read it through a channel.
        case general
    }

    /// Cleared when the kernel lacks `openat2`'s `RESOLVE_CACHED` or `RWF_NOWAIT`.
    private static let inlineSupported = Atomic<Bool>(true)

    /// The whole file read on the calling thread where that cannot block: the
    /// path resolved from the dentry cache only (`openat2` with
    /// `RESOLVE_CACHED`) and the bytes from the page cache only (`preadv2`
    /// with `RWF_NOWAIT`), which is what io_uring itself tries first, inline,
    /// before it hands a request to its workers. `nil` when anything would
    /// wait for the device (or failed): the caller goes through the engine,
    /// which gives the errors.
    static func readWithoutBlocking(_ path: FilePath, maximumSize: Int) -> DataChunk? {
        guard inlineSupported.load(ordering: .relaxed) else { return nil }
        let fd = path.withPlatformString { cliburing_open_cached($0, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
        guard fd >= 0 else {
            let e = cliburing_errno()
            if e == ENOSYS || e == EINVAL || e == EPERM { inlineSupported.store(false, ordering: .relaxed) }
            return nil
        }
        defer { _ = close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_size > 0, st.st_size <= limit,
              Int(st.st_size) <= maximumSize else { return nil }
        let size = Int(st.st_size)
        let base = malloc(size + 1)!
        let n = cliburing_pread_nowait(fd, base, size + 1, 0)
        // Fewer bytes than the stat said: part of the file is not cached (or it
        // shrank); more: it grew. The engine's read settles both.
        guard n == size else {
            if n < 0, cliburing_errno() == EOPNOTSUPP || cliburing_errno() == EINVAL {
                inlineSupported.store(false, ordering: .relaxed)
            }
            free(base)
            return nil
        }
        return DataChunk(bytesNoCopy: UnsafeRawBufferPointer(start: base, count: size), deallocator: .free)
    }

    static func read(_ path: FilePath, maximumSize: Int, engine: IOEngine) async -> Outcome {
        await withUnsafeContinuation { continuation in
            start(path, maximumSize: maximumSize, engine: engine) { continuation.resume(returning: $0) }
        }
    }

    /// Runs the read; `completion` runs once, on the engine's thread.
    static func start(_ path: FilePath, maximumSize: Int, engine: IOEngine,
                      _ completion: @escaping @Sendable (Outcome) -> Void) {
        let memory = RequestMemory(paths: [path])
        let open = IORequest(.openat(directory: AT_FDCWD, path: memory.paths[0],
                                     flags: O_RDONLY | O_CLOEXEC | O_NONBLOCK, mode: 0),
                             owner: memory, mayBlock: true) { res in
            guard res >= 0 else {
                return completion(.failed(IOError(.openForReading, path: path, errno: Errno(rawValue: -res))))
            }
            opened(fd: res, path, maximumSize: maximumSize, engine: engine, completion)
        }
        engine.submit(open)
    }

    private static func opened(fd: Int32, _ path: FilePath, maximumSize: Int, engine: IOEngine,
                               _ completion: @escaping @Sendable (Outcome) -> Void) {
        var st = stat()
        var rc = fstat(fd, &st)
        while rc != 0 && cliburing_errno() == EINTR { rc = fstat(fd, &st) }
        guard rc == 0, st.st_mode & S_IFMT == S_IFREG, st.st_size > 0, st.st_size <= limit else {
            _ = close(fd)
            return completion(.general)
        }
        let size = Int(st.st_size)
        guard size <= maximumSize else {
            _ = close(fd)
            return completion(.failed(IOError(.read, path: path, errno: .fileTooLarge,
                                              detail: "more than the maximum size of \(maximumSize) bytes")))
        }
        // One byte more than the stat said: a full buffer means the file grew.
        let base = malloc(size + 1)!
        // The address only: the completion owns the bytes (the kernel is done with them by then).
        let address = UInt(bitPattern: base)
        engine.submit(IORequest(.read(fd: fd, buffer: UnsafeMutableRawBufferPointer(start: base, count: size + 1),
                                      offset: 0)) { res in
            let buffer = UnsafeMutableRawBufferPointer(start: UnsafeMutableRawPointer(bitPattern: address), count: size + 1)
            _ = close(fd)
            guard res >= 0, Int(res) <= size else {
                free(buffer.baseAddress)
                return completion(res < 0 ? .failed(IOError(.read, path: path, errno: Errno(rawValue: -res))) : .general)
            }
            if res == 0 {
                free(buffer.baseAddress)
                return completion(.done(.empty))
            }
            // A read of a regular file that returns fewer bytes than asked
            // for has reached its end.
            completion(.done(DataChunk(bytesNoCopy: UnsafeRawBufferPointer(rebasing: buffer[0..<Int(res)]),
                                       deallocator: .free)))
        })
    }
}
