#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import RingIOBase
import RingIOChannel
import SystemPackage
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// The small-file path of `IO.copyFile` as plain system calls on one
/// worker of `IOQueue.global`: one hand-off in, one completion out.
///
/// ```
///  caller      pool worker
///  ──────      ───────────
///  submit ──▶ stat source, stat destination
///             open source, fstat, open (create) target[, fstat, ftruncate]
///             small: read, write[, fsync], close, close[, rename]
///  resumes ◀── copied, failed, or both files open for the general path
/// ```
///
/// io_uring runs every path operation (statx, open, rename) on its io-wq
/// workers, so the ring's chain crossed threads at each of them (7
/// `io_uring_enter` and 7–10 futex calls per copy); here the whole copy is
/// one worker's run of about ten system calls. A regular file larger than
/// `IO.smallFileLimit` (or a copy that asked for another strategy) comes
/// back open, for `FileCopier`'s general path. A source or an existing
/// destination that is not a regular file is left to the engine's path
/// (`SmallFileCopy`), untouched: its open may wait (a FIFO) or have
/// effects (a device), which a pool worker must not take on.
extension SmallFileCopy {
    /// Runs the copy on a pool worker. `nil`: not regular files; take the
    /// engine's path (nothing was opened or created).
    static func blocking(_ paths: PathRequest.Paths, permissions: FilePermissions?, createNew: Bool, noReplace: Bool,
                         chain: Bool, sync: Bool, readable: Bool) async -> Outcome? {
        // Already on a thread that may block (a worker of `IOQueue.global`,
        // where the hop would go anyway, or one that said so): here, no hop.
        if BlockingCalls.allowedHere || IOQueue.global.isCurrent {
            return BlockingCopy(paths: paths, permissions: permissions, createNew: createNew, noReplace: noReplace,
                                chain: chain, sync: sync, readable: readable).run()
        }
        return await withUnsafeContinuation { continuation in
            IOQueue.global.async {
                let copy = BlockingCopy(paths: paths, permissions: permissions, createNew: createNew, noReplace: noReplace,
                                        chain: chain, sync: sync, readable: readable)
                continuation.resume(returning: copy.run())
            }
        }
    }
}

/// Threads on which the library may make a small copy's blocking system
/// calls itself instead of handing them to `IOQueue.global`.
package enum BlockingCalls {
    private static let marker = ThreadLocalPointer()

    /// Whether the calling thread is inside `allowed(_:)`.
    package static var allowedHere: Bool { marker.value != nil }

    /// Runs `body` with blocking calls allowed on this thread: a thread that
    /// has nothing else to do meanwhile (ringcp's main thread, running its
    /// one copy's task) saves the hand-off to a pool worker and back.
    package static func allowed<T>(_ body: () throws -> T) rethrows -> T {
        let previous = marker.value
        marker.value = UnsafeMutableRawPointer(bitPattern: 1)
        defer { marker.value = previous }
        return try body()
    }
}

/// One small copy's system calls, in order, on the calling thread.
private struct BlockingCopy {
    let paths: PathRequest.Paths
    let permissions: FilePermissions?
    let createNew: Bool
    let noReplace: Bool
    let chain: Bool
    let sync: Bool
    let readable: Bool

    private var source: FilePath { paths.source }
    private var shown: FilePath { paths.shownDestination }

    private func sourceError(_ operation: IOError.Operation, _ errno: Int32) -> SmallFileCopy.Outcome {
        .failed(IOError(operation, path: source, side: .source, errno: Errno(rawValue: errno)))
    }

    private func destinationError(_ operation: IOError.Operation, _ errno: Int32) -> SmallFileCopy.Outcome {
        .failed(IOError(operation, path: shown, side: .destination, errno: Errno(rawValue: errno)))
    }

    private static func sameFile(_ a: stat, _ b: stat) -> Bool { a.st_dev == b.st_dev && a.st_ino == b.st_ino }

    func run() -> SmallFileCopy.Outcome? {
        var sourceStatus = stat()
        if retrying({ source.withPlatformString { stat($0, &sourceStatus) } }) != 0 {
            return sourceError(.stat, errno)
        }
        switch sourceStatus.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR: return sourceError(.openForReading, EISDIR)
        // A socket's open fails (ENXIO), with no effect: here, before anything is created.
        case S_IFSOCK:
            let fd = retrying { source.withPlatformString { open($0, O_RDONLY | O_CLOEXEC | O_NOCTTY) } }
            if fd < 0 { return sourceError(.openForReading, errno) }
            _ = close(fd)
            return nil
        default: return nil
        }
        // What is at the destination (the final one, followed as a rename
        // would not: a symlink to the source is the source).
        var existing = stat()
        let exists = retrying({ (paths.destination ?? paths.target).withPlatformString { stat($0, &existing) } }) == 0
        if exists {
            if existing.st_mode & S_IFMT != S_IFREG { return nil }
            if Self.sameFile(existing, sourceStatus) { return sameFileError }
        }
        let input = retrying { source.withPlatformString { open($0, O_RDONLY | O_CLOEXEC | O_NOCTTY) } }
        if input < 0 { return sourceError(.openForReading, errno) }
        if retrying({ fstat(input, &sourceStatus) }) != 0 {
            let e = errno
            _ = close(input)
            return sourceError(.stat, e)
        }
        if sourceStatus.st_mode & S_IFMT != S_IFREG {
            // Replaced since its stat; the engine's path opens it again as it is now.
            _ = close(input)
            return nil
        }
        let mode = permissions?.rawValue ?? CModeT(sourceStatus.st_mode & 0o7777)
        let flags = (readable ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC | O_NOCTTY
        // In place, a destination that was not there is created exclusively
        // too: then a failed copy knows the file is its own, and removes it.
        var created = createNew || !exists
        var output = retrying { paths.target.withPlatformString { open($0, flags | (created ? O_EXCL : 0), mode) } }
        if output < 0 && errno == EEXIST && !createNew {
            // Made by someone else since the stat: written in place, as it is.
            created = false
            output = retrying { paths.target.withPlatformString { open($0, flags, mode) } }
        }
        if output < 0 {
            let e = errno
            _ = close(input)
            return destinationError(createNew ? .create : .openForWriting, e)
        }
        var destinationKind: FileKind? = nil
        if created {
            if exists && paths.destination != nil { destinationKind = .regular }
        } else {
            // An existing file: which one is it? Compared before anything is truncated.
            var status = stat()
            var failure: SmallFileCopy.Outcome?
            if retrying({ fstat(output, &status) }) != 0 {
                failure = destinationError(.stat, errno)
            } else if Self.sameFile(status, sourceStatus) {
                failure = sameFileError
            } else if status.st_mode & S_IFMT == S_IFREG && status.st_size > 0 && retrying({ ftruncate(output, 0) }) != 0 {
                failure = destinationError(.write, errno)
            }
            if let failure {
                _ = close(input)
                _ = close(output)
                return failure
            }
            if status.st_mode & S_IFMT != S_IFREG {
                return .notSmall(PathRequest.Pair(info: CopyFileInfo(sourceStatus), input: input, output: output,
                                                  destinationKind: FileKind(mode: status.st_mode)))
            }
        }
        let size = Int(sourceStatus.st_size)
        guard chain && size <= IO.smallFileLimit else {
            return .notSmall(PathRequest.Pair(info: CopyFileInfo(sourceStatus), input: input, output: output,
                                              destinationKind: destinationKind, created: created))
        }
        return copy(input, output, size: size, removingOnFailure: created)
    }

    private var sameFileError: SmallFileCopy.Outcome {
        .failed(IOError(.copyOntoSource, path: shown, side: .destination, errno: .invalidArgument))
    }

    /// Reads the source whole, writes it, closes both, renames; on failure
    /// closes both and removes the target if `created`.
    private func copy(_ input: Int32, _ output: Int32, size: Int, removingOnFailure created: Bool) -> SmallFileCopy.Outcome {
        var open = (input: true, output: true)
        func fail(_ outcome: SmallFileCopy.Outcome) -> SmallFileCopy.Outcome {
            if open.input { _ = close(input) }
            if open.output { _ = close(output) }
            if created { _ = paths.target.withPlatformString { unlink($0) } }
            return outcome
        }
        // A file whose stat says 0 bytes may still have some (procfs): it is read to its end.
        var capacity = size == 0 ? 4096 : size
        var buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        var count = 0
        while count < capacity {
            let n = retrying { read(input, buffer + count, capacity - count) }
            if n < 0 { return fail(sourceError(.read, errno)) }
            if n == 0 { break }  // shrank since its stat: what is there now is copied
            count += n
            if count == capacity && size == 0 {
                // Not as the stat said: more, up to the limit; past it, the general path.
                guard capacity < IO.smallFileLimit + 1 else { return fail(.changed) }
                let larger = UnsafeMutableRawPointer.allocate(byteCount: Swift.min(capacity * 4, IO.smallFileLimit + 1),
                                                              alignment: 16)
                larger.copyMemory(from: buffer, byteCount: count)
                buffer.deallocate()
                buffer = larger
                capacity = Swift.min(capacity * 4, IO.smallFileLimit + 1)
            }
        }
        if size == 0 && count > IO.smallFileLimit { return fail(.changed) }
        var written = 0
        while written < count {
            let n = retrying { write(output, buffer + written, count - written) }
            if n < 0 { return fail(destinationError(.write, errno)) }
            if n == 0 { return fail(destinationError(.write, EIO)) }
            written += n
        }
        if sync && retrying({ fsync(output) }) != 0 { return fail(destinationError(.write, errno)) }
        open.input = false
        if close(input) != 0 && errno != EINTR { return fail(sourceError(.close, errno)) }
        open.output = false
        if close(output) != 0 && errno != EINTR { return fail(destinationError(.close, errno)) }
        if let destination = paths.destination {
            let renamed = paths.target.withPlatformString { old in
                destination.withPlatformString { new in
                    noReplace ? cliburing_renameat2(AT_FDCWD, old, AT_FDCWD, new, UInt32(RENAME_NOREPLACE))
                        : rename(old, new)
                }
            }
            if renamed != 0 { return fail(destinationError(.rename, errno)) }
        }
        return .copied(Int64(count))
    }
}

/// `call` again while it fails with `EINTR`.
@inline(__always)
private func retrying<T: BinaryInteger>(_ call: () -> T) -> T {
    var result = call()
    while result < 0 && errno == EINTR { result = call() }
    return result
}
