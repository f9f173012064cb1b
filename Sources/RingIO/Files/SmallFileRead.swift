#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import Synchronization
import RingIOBase
import RingIOChannel
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

/// The small-file paths of `IO.readFile`.
///
/// 1. On the calling thread, where nothing waits for the device:
///    `openat2(RESOLVE_CACHED)`, `fstat`, `preadv2(RWF_NOWAIT)`, `close`
///    (`readWithoutBlocking`). When the path is cached but the bytes are
///    not, the open fd goes to the engine: a read linked to its close, one
///    submission, one completion (`readOpened`).
/// 2. Otherwise one linked chain through the engine (SmallFileRead+Chain.swift):
///
/// ```
///  caller            engine                                  engine thread
///  ──────            ──────                                  ─────────────
///  submit ────▶ open ─link─▶ read 64 KiB ═hard═▶ install fd ═hard═▶ close
///                                                                 │ fstat(fd): regular?
///  resumes ◀──────────────────────────────────── bytes, or more reads ◀┘
/// ```
///
///    The open puts the file in a slot of the ring's registered-file table
///    (a direct descriptor: the read names the slot, so it can be linked to
///    the open), the read takes a guess of the size, the install hands a
///    plain fd to the completion for `fstat` (is it regular? did the guess
///    hold it all?), the close frees the slot. The caller resumes once,
///    after the close. On the thread pool the same chain runs on one worker
///    with a plain fd. Where the kernel lacks `IORING_OP_FIXED_FD_INSTALL`
///    (before 6.8), or the file table is full or absent: an open, then one
///    read submitted from its completion (`openThenRead`).
///
/// Every open uses `O_NONBLOCK`, so that nothing waits (a FIFO without a
/// writer). What is not a regular file and gave no bytes goes to the
/// channel path, which opens it again as a blocking open would; one that
/// gave bytes (a FIFO with data, a character device) is read on through a
/// channel on the same fd, after the bytes already taken.
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
        /// Not a regular file, and these bytes were taken from it: read the
        /// rest from `fd` (blocking now; the receiver closes it).
        case partial(DataChunk, fd: Int32)
    }

    /// What the calling thread's attempt found.
    enum Inline {
        case bytes(DataChunk)
        /// A regular file of `size` bytes whose path was cached and whose
        /// bytes are not: its open fd.
        case opened(fd: Int32, size: Int)
        case none
    }

    /// Cleared when the kernel lacks `RWF_NOWAIT` (`EINVAL`; `CachedOpens`
    /// says whether `openat2`'s `RESOLVE_CACHED` works). A file system that
    /// refuses such reads (`EOPNOTSUPP`: tmpfs) is known per device, as for
    /// channels (`NoWaitReads`), and leaves the others inline.
    private static let inlineSupported = Atomic<Bool>(true)

    /// The whole file read on the calling thread where that cannot block: the
    /// path resolved from the dentry cache only (`openat2` with
    /// `RESOLVE_CACHED`) and the bytes from the page cache only (`preadv2`
    /// with `RWF_NOWAIT`), which is what io_uring itself tries first, inline,
    /// before it hands a request to its workers. `nil` when anything would
    /// wait for the device (or failed): the caller goes through the engine,
    /// which gives the errors.
    static func readWithoutBlocking(_ path: FilePath, maximumSize: Int) -> DataChunk? {
        if case .bytes(let bytes) = attemptInline(path, maximumSize: maximumSize, keepOpen: false) { return bytes }
        return nil
    }

    /// `readWithoutBlocking`, or with `keepOpen` the open fd of a regular
    /// file of 1 ... `limit` bytes whose bytes are not all cached.
    static func attemptInline(_ path: FilePath, maximumSize: Int, keepOpen: Bool) -> Inline {
        guard CachedOpens.available, inlineSupported.load(ordering: .relaxed) else { return .none }
        guard let fd = try? CachedOpens.open(path, flags: O_RDONLY | O_CLOEXEC | O_NONBLOCK) else { return .none }
        guard let st = try? Syscall.fstat(fd), st.type == .regular, st.size > 0, st.size <= limit,
              Int(st.size) <= maximumSize,
              NoWaitReads.of(device: UInt64(st.deviceID.rawValue)) != .unsupported else {
            Syscall.closeIgnoringErrors(fd)
            return .none
        }
        let size = Int(st.size)
        let base = malloc(size + 1)!
        let read = Result { () throws(Errno) in
            try Syscall.preadNowait(fd, into: UnsafeMutableRawBufferPointer(start: base, count: size + 1), at: 0)
        }
        let n = (try? read.get()) ?? -1
        // Fewer bytes than the stat said: part of the file is not cached (or it
        // shrank); more: it grew. The engine's read settles both.
        guard n == size else {
            free(base)
            if case .failure(let e) = read, e == .notSupported {
                NoWaitReads.learn(.unsupported, device: UInt64(st.deviceID.rawValue))
            } else if case .failure(let e) = read, e == .invalidArgument {
                inlineSupported.store(false, ordering: .relaxed)
            } else if keepOpen && n < size {
                return .opened(fd: fd, size: size)
            }
            Syscall.closeIgnoringErrors(fd)
            return .none
        }
        Syscall.closeIgnoringErrors(fd)
        return .bytes(DataChunk(bytesNoCopy: UnsafeRawBufferPointer(start: base, count: size), deallocator: .free))
    }

    static func read(_ path: FilePath, maximumSize: Int, engine: IOEngine) async -> Outcome {
        await withUnsafeContinuation { continuation in
            start(path, maximumSize: maximumSize, engine: engine) { continuation.resume(returning: $0) }
        }
    }

    /// Runs the read; `completion` runs once, on the engine's thread.
    static func start(_ path: FilePath, maximumSize: Int, engine: IOEngine,
                      _ completion: @escaping @Sendable (Outcome) -> Void) {
        if engine.supportsChainedFiles {
            startChain(path, maximumSize: maximumSize, engine: engine) { outcome, noSlot in
                // No free slot in the ring's file table: the two-step path.
                if noSlot { return openThenRead(path, maximumSize: maximumSize, engine: engine, completion) }
                completion(outcome)
            }
        } else {
            openThenRead(path, maximumSize: maximumSize, engine: engine, completion)
        }
    }

    /// An open, then a read submitted from its completion (engines without
    /// chained files).
    static func openThenRead(_ path: FilePath, maximumSize: Int, engine: IOEngine,
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
        guard let st = try? Syscall.fstat(fd), st.type == .regular, st.size > 0, st.size <= limit else {
            Syscall.closeIgnoringErrors(fd)
            return completion(.general)
        }
        let size = Int(st.size)
        guard size <= maximumSize else {
            Syscall.closeIgnoringErrors(fd)
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
            Syscall.closeIgnoringErrors(fd)
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
