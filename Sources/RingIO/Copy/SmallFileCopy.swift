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

/// The small-file path of every copy (`CopyPlan.Step.wholeFile`) as plain
/// system calls on one worker of `IOQueue.global`: one hand-off in, one
/// completion out.
///
/// ```
///  caller      pool worker
///  ──────      ───────────
///  submit ──▶ [stat source][, stat destination: atomic replace]
///             open source, fstat, open (create, O_EXCL) target
///             [EEXIST, in place: stat it, open it, fstat, ftruncate]
///             small: read, write[, fsync], close, close[, rename]
///  resumes ◀── copied, failed, or both files open for the general path
/// ```
///
/// io_uring runs every path operation (statx, open, rename) on its io-wq
/// workers, so a ring chain crossed threads at each of them (7
/// `io_uring_enter` and 7–10 futex calls per copy); here the whole copy is
/// one worker's run of about ten system calls. A regular file larger than
/// `IO.smallFileLimit` (or a copy that asked for another strategy) comes
/// back open, for `FileCopier`'s general path. A source or an existing
/// destination that is not a regular file is left to the engine's opens
/// (`PathRequest.openPair`), untouched: its open may wait (a FIFO) or have
/// effects (a device), which a pool worker must not take on.
enum SmallFileCopy {
    enum Outcome: Sendable {
        case copied(Int64)
        case failed(IOError)
        /// Not a small regular file: both are open, for the general path.
        case notSmall(PathRequest.Pair)
        /// The source grew past the small-file limit while read (its stat
        /// said 0 bytes: procfs): both files are closed, nothing is left
        /// behind (when the copy created its file), and the caller copies
        /// again by the general path.
        case changed
    }

    /// Runs the copy on a pool worker. `nil`: not regular files; take the
    /// engine's path (nothing was opened or created).
    static func blocking(_ paths: PathRequest.Paths, permissions: FilePermissions?, createNew: Bool,
                         request: CopyPlan.Request, preserve: IO.CopyOptions.Preserved, sync: Bool,
                         readable: Bool, sourceIsRegular: Bool, modeMask: CModeT = 0o7777) async -> Outcome? {
        let copy = BlockingCopy(paths: paths, permissions: permissions, createNew: createNew,
                                request: request, preserve: preserve, sync: sync, readable: readable,
                                sourceIsRegular: sourceIsRegular, modeMask: modeMask)
        return await BlockingCalls.run { copy.run() }
    }
}

/// Threads on which the library may make its short blocking system calls
/// itself (a small file's copy, `IO.info`, `IO.createDirectory` and the
/// like) instead of handing them to a worker of `IOQueue.global` and back.
///
/// For a thread that has nothing else to do while they run: ringcp's main
/// thread, running the task of its one small copy on a `TaskExecutor` of
/// its own, makes the copy's calls itself, as `cp` does, with no thread
/// started and no hand-off either way:
///
/// ```swift
/// BlockingCalls.allowed {
///     // Jobs of tasks run here: a small copy's stat, opens, read, write,
///     // closes and rename are made on this thread.
/// }
/// ```
///
/// Never from a thread that must stay responsive (an executor shared with
/// other work, the engine's): each call blocks it for as long as the file
/// system takes.
public enum BlockingCalls {
    private static let marker = ThreadLocalPointer()

    /// Whether the calling thread is inside `allowed(_:)`.
    public static var allowedHere: Bool { marker.value != nil }

    /// Runs `body`, whose system calls may block, here when this thread
    /// may block (a worker of `IOQueue.global`, where the hop would go
    /// anyway, or one inside `allowed`), else on a worker of
    /// `IOQueue.global`: one hop there and one back.
    package static func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        if allowedHere || IOQueue.global.isCurrent { return body() }
        return await withUnsafeContinuation { continuation in
            IOQueue.global.async { continuation.resume(returning: body()) }
        }
    }

    /// Runs `body` with blocking calls allowed on this thread (nested
    /// calls are fine; the thread's previous state comes back after).
    public static func allowed<T>(_ body: () throws -> T) rethrows -> T {
        let previous = marker.value
        marker.value = UnsafeMutableRawPointer(bitPattern: 1)
        defer { marker.value = previous }
        return try body()
    }
}

/// One small copy's system calls, in order, on the calling thread.
struct BlockingCopy: Sendable {
    let paths: PathRequest.Paths
    let permissions: FilePermissions?
    let createNew: Bool
    let request: CopyPlan.Request
    let preserve: IO.CopyOptions.Preserved
    let sync: Bool
    let readable: Bool
    /// The caller found the source to be a regular file just before: no stat of its path.
    let sourceIsRegular: Bool
    /// The bits of the source's mode a new file takes (where `permissions` is nil).
    var modeMask: CModeT = 0o7777
    /// The open directory the source is named in (`sourceName`), or
    /// `AT_FDCWD` (`sourceName` is then `paths.source`); `paths.source` is
    /// only shown in errors.
    var sourceAt: CInt = AT_FDCWD
    var sourceName: Name
    /// The same for the target: the file written (in place, the
    /// destination; with `paths.atomic`, the temporary).
    var targetAt: CInt = AT_FDCWD
    var targetName: Name
    /// With `paths.atomic` and a `targetAt`: the destination's name in that
    /// directory, which the temporary `targetName` is renamed onto (nil:
    /// `paths.atomic`'s own paths are stat'ed and renamed).
    var destinationName: Name?

    /// What a file is opened by: a path, or one name (the last component
    /// of a path, read where it is: no copy, no parsing).
    enum Name: Sendable {
        case path(FilePath)
        case component(FilePath.Component)

        func with<T>(_ body: (UnsafePointer<CChar>) throws(Errno) -> T) throws(Errno) -> T {
            switch self {
            case .path(let path): try Syscall.withPath(path, body)
            case .component(let name): try name.withPlatformString { p in Result { () throws(Errno) in try body(p) } }.get()
            }
        }
    }

    /// A copy by paths, relative to the working directory.
    init(paths: PathRequest.Paths, permissions: FilePermissions?, createNew: Bool, request: CopyPlan.Request,
         preserve: IO.CopyOptions.Preserved, sync: Bool, readable: Bool, sourceIsRegular: Bool, modeMask: CModeT) {
        self.paths = paths
        self.permissions = permissions
        self.createNew = createNew
        self.request = request
        self.preserve = preserve
        self.sync = sync
        self.readable = readable
        self.sourceIsRegular = sourceIsRegular
        self.modeMask = modeMask
        sourceName = .path(paths.source)
        targetName = .path(paths.target)
    }

    private func openSource() throws(Errno) -> Int32 {
        try sourceName.with { (p) throws(Errno) in try Syscall.openat(sourceAt, p, flags: O_RDONLY | O_CLOEXEC | O_NOCTTY) }
    }

    private func openTarget(flags: CInt, mode: CModeT) throws(Errno) -> Int32 {
        try targetName.with { (p) throws(Errno) in try Syscall.openat(targetAt, p, flags: flags, mode: mode) }
    }

    /// `stat` of `name` relative to `directory` (by its path where that is the working directory).
    private static func stat(_ name: Name, at directory: CInt) throws(Errno) -> Stat {
        if directory == AT_FDCWD, case .path(let path) = name { return try Syscall.stat(path) }
        return try name.with { (p) throws(Errno) in try Syscall.fstatat(directory, p, followingSymlinks: true) }
    }

    private func statTarget() throws(Errno) -> Stat { try Self.stat(targetName, at: targetAt) }

    /// Removes the target (this copy's own new file: the temporary, or a file it created in place).
    func removeTarget() {
        if targetAt == AT_FDCWD, case .path(let path) = targetName { return _ = try? Syscall.unlink(path) }
        _ = try? targetName.with { (p) throws(Errno) in try Syscall.unlinkat(targetAt, p) }
    }

    private var source: FilePath { paths.source }
    private var shown: FilePath { paths.shownDestination }

    private func sourceError(_ operation: IOError.Operation, _ errno: Errno) -> SmallFileCopy.Outcome {
        .failed(IOError(operation, path: source, side: .source, errno: errno))
    }

    private func destinationError(_ operation: IOError.Operation, _ errno: Errno) -> SmallFileCopy.Outcome {
        .failed(IOError(operation, path: shown, side: .destination, errno: errno))
    }

    private static func sameFile(_ a: Stat, _ b: Stat) -> Bool { a.deviceID == b.deviceID && a.inode == b.inode }

    func run() -> SmallFileCopy.Outcome? {
        // A source the caller has just found regular (its own lstat, a
        // directory listing) is opened at once: the fstat below checks it.
        if !sourceIsRegular {
            let found: Stat
            do throws(Errno) {
                found = try Self.stat(sourceName, at: sourceAt)
            } catch {
                return sourceError(.stat, error)
            }
            switch found.type {
            case .regular: break
            case .directory: return sourceError(.openForReading, .isDirectory)
            // A socket's open fails (ENXIO), with no effect: here, before anything is created.
            case .socket:
                do throws(Errno) {
                    Syscall.closeIgnoringErrors(try openSource())
                } catch {
                    return sourceError(.openForReading, error)
                }
                return nil
            default: return nil
            }
        }
        // An atomic replace looks at the final destination first (followed
        // as a rename would not: a symlink to the source is the source). In
        // place, the exclusive create below says whether anything is there
        // (EEXIST), and only then is it looked at: a new file costs no stat.
        var existing: Stat? = nil
        if let atomic = paths.atomic {
            if let destinationName {
                existing = try? Self.stat(destinationName, at: targetAt)
            } else {
                existing = try? Syscall.stat(atomic.destination)
            }
            if let existing, existing.type != .regular { return nil }
        }
        let input: Int32
        do throws(Errno) { input = try openSource() } catch {
            return sourceError(.openForReading, error)
        }
        let sourceStatus: Stat
        do throws(Errno) { sourceStatus = try Syscall.fstat(input) } catch {
            Syscall.closeIgnoringErrors(input)
            return sourceError(.stat, error)
        }
        if sourceStatus.type != .regular {
            // Replaced since its stat; the engine's path opens it again as it is now.
            Syscall.closeIgnoringErrors(input)
            if sourceStatus.type == .directory { return sourceError(.openForReading, .isDirectory) }
            return nil
        }
        if let existing, Self.sameFile(existing, sourceStatus) {
            Syscall.closeIgnoringErrors(input)
            return sameFileError
        }
        let mode = permissions?.rawValue ?? CModeT(sourceStatus.mode.rawValue & 0o7777 & modeMask)
        let flags = (readable ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC | O_NOCTTY
        // Created exclusively first, in place too: then a failed copy knows
        // the file is its own, and removes it.
        var created = true
        var opened = Result { () throws(Errno) in
            try openTarget(flags: flags | O_EXCL, mode: mode)
        }
        if case .failure(.fileExists) = opened, paths.atomic == nil {
            // Something is there: which file is it?
            let found = try? statTarget()
            if let found, Self.sameFile(found, sourceStatus) {
                Syscall.closeIgnoringErrors(input)
                return sameFileError
            }
            if !createNew {
                if let found, found.type != .regular {
                    // A FIFO, a device: the engine's path opens it (nothing was created).
                    Syscall.closeIgnoringErrors(input)
                    return nil
                }
                // Written in place, as it is (a dangling symlink: created through it).
                created = false
                opened = Result { () throws(Errno) in try openTarget(flags: flags, mode: mode) }
            }
        }
        let output: Int32
        switch opened {
        case .success(let fd): output = fd
        case .failure(let error):
            Syscall.closeIgnoringErrors(input)
            return destinationError(createNew ? .create : .openForWriting, error)
        }
        var destinationKind: FileKind? = nil
        if created {
            if existing != nil && paths.destination != nil { destinationKind = .regular }
        } else {
            // An existing file: which one is it? Compared before anything is truncated.
            var status: Stat? = nil
            var failure: SmallFileCopy.Outcome?
            do throws(Errno) {
                let found = try Syscall.fstat(output)
                status = found
                if Self.sameFile(found, sourceStatus) {
                    failure = sameFileError
                } else if found.type == .regular && found.size > 0 {
                    do throws(Errno) { try Syscall.ftruncate(output, to: 0) } catch { failure = destinationError(.write, error) }
                }
            } catch {
                failure = destinationError(.stat, error)
            }
            if let failure {
                Syscall.closeIgnoringErrors(input)
                Syscall.closeIgnoringErrors(output)
                return failure
            }
            if let status, status.type != .regular {
                return .notSmall(PathRequest.Pair(info: CopyFileInfo(sourceStatus), input: input, output: output,
                                                  destinationKind: status.type))
            }
        }
        let size = Int(sourceStatus.size)
        guard CopyPlan.copiesWhole(size: Int64(size), request: request) else {
            return .notSmall(PathRequest.Pair(info: CopyFileInfo(sourceStatus), input: input, output: output,
                                              destinationKind: destinationKind, created: created))
        }
        return copy(input, output, size: size, source: sourceStatus, removingOnFailure: created)
    }

    /// The temporary renamed onto the destination: by their names in
    /// `targetAt` where the copy has them, else by `atomic`'s paths.
    private func commit(_ atomic: AtomicReplace) throws(Errno) {
        guard let destinationName else { return try atomic.commit() }
        let flags = atomic.noReplace ? UInt32(RENAME_NOREPLACE) : 0
        try targetName.with { (temporary) throws(Errno) in
            try destinationName.with { (final) throws(Errno) in
                try Syscall.renameat2(targetAt, temporary, targetAt, final, flags: flags)
            }
        }
    }

    private var sameFileError: SmallFileCopy.Outcome {
        .failed(IOError(.copyOntoSource, path: shown, side: .destination, errno: .invalidArgument))
    }

    /// Reads the source whole, writes it, closes both, renames; on failure
    /// closes both and removes the target if `created`.
    private func copy(_ input: Int32, _ output: Int32, size: Int, source status: Stat,
                      removingOnFailure created: Bool) -> SmallFileCopy.Outcome {
        var open = (input: true, output: true)
        func fail(_ outcome: SmallFileCopy.Outcome) -> SmallFileCopy.Outcome {
            if open.input { Syscall.closeIgnoringErrors(input) }
            if open.output { Syscall.closeIgnoringErrors(output) }
            if created { removeTarget() }
            return outcome
        }
        // A file whose stat says 0 bytes may still have some (procfs): it is read to its end.
        var capacity = size == 0 ? 4096 : size
        var buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        var count = 0
        while count < capacity {
            let n: Int
            do throws(Errno) { n = try Syscall.read(input, into: UnsafeMutableRawBufferPointer(start: buffer + count, count: capacity - count)) } catch {
                return fail(sourceError(.read, error))
            }
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
            let n: Int
            do throws(Errno) { n = try Syscall.write(output, from: UnsafeRawBufferPointer(start: buffer + written, count: count - written)) } catch {
                return fail(destinationError(.write, error))
            }
            if n == 0 { return fail(destinationError(.write, .ioError)) }
            written += n
        }
        if !preserve.isEmpty {
            do throws(Errno) { try AttributeCopy.apply(preserve, from: status, to: output) } catch {
                return fail(destinationError(.setAttributes, error))
            }
        }
        if sync {
            do throws(Errno) { try Syscall.fsync(output) } catch { return fail(destinationError(.write, error)) }
        }
        open.input = false
        do throws(Errno) { try Syscall.close(input) } catch { return fail(sourceError(.close, error)) }
        open.output = false
        do throws(Errno) { try Syscall.close(output) } catch { return fail(destinationError(.close, error)) }
        if let atomic = paths.atomic {
            do throws(Errno) { try commit(atomic) } catch {
                return fail(destinationError(.rename, error))
            }
        }
        return .copied(Int64(count))
    }
}
