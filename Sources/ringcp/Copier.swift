#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import Synchronization
import SystemPackage

/// How a large file's bytes move.
enum CopyMethod: String, Sendable, CaseIterable {
    /// Spliced through pipes inside the kernel (`IO.copyRanges`); falls back
    /// to channels where the file systems cannot splice.
    case kernel
    /// Read and written through two random channels.
    case channels
}

struct Settings: Sendable {
    var method = CopyMethod.kernel
    /// Large files bypass the page cache (O_DIRECT, through the channels).
    var direct = false
    var recursive = false
    var preserve = false
    var noClobber = false
    var force = false
    var verbose = false
    var inPlace = false
    var verify = false
    var jobs = 64
}

/// Walks the sources and copies each item by cp's rules. Small regular
/// files run `jobs` at a time (their requests share the ring's batches);
/// a large file runs alone, with its own requests in flight.
final class Copier: Sendable {
    let settings: Settings
    let progress: Progress?
    /// The process's umask, read once at start.
    let umask: mode_t
    /// The working directory, for the library calls, which take absolute paths.
    private let cwd: FilePath
    private let state = Mutex(State())

    private struct State {
        var failed = false
        var interrupted = false
        /// Directories whose mode (and times, with -p) are set once their contents are in.
        var directories: [(path: FilePath, source: FileStatus, mode: mode_t)] = []
    }

    init(settings: Settings, progress: Progress?) {
        self.settings = settings
        self.progress = progress
        let mask = Glibc.umask(0)
        _ = Glibc.umask(mask)
        umask = mask
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        cwd = getcwd(&buffer, buffer.count) != nil
            ? buffer.withUnsafeBufferPointer { FilePath(platformString: $0.baseAddress!) } : "/"
    }

    var failed: Bool { state.withLock { $0.failed } }
    var interrupted: Bool { state.withLock { $0.interrupted } }

    /// One line on stderr; the exit status becomes 1.
    func report(_ message: String) {
        state.withLock { $0.failed = true }
        writeLine(STDERR_FILENO, "ringcp: \(message)")
    }

    private func reportError(_ what: String, _ path: FilePath, _ error: Errno) {
        if error == .canceled {
            state.withLock { $0.interrupted = true }
            return
        }
        report("\(what) '\(path)': \(describe(error))")
    }

    private func announce(_ source: FilePath, _ destination: FilePath) {
        if settings.verbose { writeLine(STDOUT_FILENO, "'\(source)' -> '\(destination)'") }
    }

    private func absolute(_ path: FilePath) -> FilePath {
        path.isAbsolute ? path : cwd.pushing(path)
    }

    // MARK: - the walk

    func copy(_ pairs: [(FilePath, FilePath)]) async {
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for (source, destination) in pairs {
                if Task.isCancelled { break }
                await copyItem(source, to: destination, topLevel: true, inNewDirectory: false, group: &group, running: &running)
            }
            await group.waitForAll()
        }
        if Task.isCancelled { state.withLock { $0.interrupted = true } }
        // Directory modes and times last, deepest first: adding entries changes a directory's mtime.
        let directories = state.withLock { $0.directories }
        for (path, source, mode) in directories.reversed() {
            if settings.preserve {
                do throws(Errno) { try FS.preserve(source, on: path) } catch {
                    reportError("cannot preserve attributes of", path, error)
                }
            } else if FS.chmod(path, mode) != 0 {
                reportError("cannot set permissions of", path, Errno(rawValue: errno))
            }
        }
    }

    /// - Parameter inNewDirectory: the destination's directory was made by
    ///   this run, so nothing can be at `destination` (an exclusive create
    ///   still catches a race): no need to look.
    private func copyItem(_ source: FilePath, to destination: FilePath, topLevel: Bool, inNewDirectory: Bool,
                          group: inout TaskGroup<Void>, running: inout Int) async {
        // Without -r, a symlink on the command line is followed (cp's default).
        let status: FileStatus
        do throws(Errno) {
            status = try FileStatus.of(source, followingSymlinks: topLevel && !settings.recursive)
        } catch {
            return reportError("cannot stat", source, error)
        }
        switch status.kind {
        case .directory:
            guard settings.recursive else { return report("-r not specified; omitting directory '\(source)'") }
            await copyDirectory(source, status, to: destination, inNewDirectory: inNewDirectory,
                                group: &group, running: &running)
        case .symlink:
            copySymlink(source, status, to: destination, inNewDirectory: inNewDirectory)
        case .regular:
            guard let plan = plan(source, status, to: destination, inNewDirectory: inNewDirectory) else { return }
            if status.size <= Int64(IO.smallFileLimit) {
                while running >= settings.jobs {
                    await group.next()
                    running -= 1
                }
                running += 1
                group.addTask { await self.copyFile(source, status, plan) }
            } else {
                await copyFile(source, status, plan)
            }
        case .fifo, .characterDevice, .blockDevice, .socket, .other:
            if settings.recursive {
                copySpecial(source, status, to: destination, inNewDirectory: inNewDirectory)
            } else if let plan = plan(source, status, to: destination, inNewDirectory: inNewDirectory) {
                await copyFile(source, status, plan)  // cp copies the contents: read until EOF
            }
        }
    }

    private func copyDirectory(_ source: FilePath, _ status: FileStatus, to destination: FilePath, inNewDirectory: Bool,
                               group: inout TaskGroup<Void>, running: inout Int) async {
        let existing: FileStatus?
        do throws(Errno) {
            existing = inNewDirectory ? nil : try FileStatus.ifPresent(destination, followingSymlinks: true)
        } catch {
            return reportError("cannot stat", destination, error)
        }
        if let existing, existing.kind != .directory {
            return report("cannot overwrite non-directory '\(destination)' with directory '\(source)'")
        }
        if !inNewDirectory, let from = FS.realPath(source),
           let into = FS.realPath(existing == nil ? parentOf(destination) : destination) {
            let target = existing == nil ? joined(into, lastComponentOf: destination) : into
            if target.starts(with: from) {
                return report("cannot copy a directory, '\(source)', into itself, '\(destination)'")
            }
        }
        if existing == nil {
            // Owner rwx while the contents go in; the real mode is set at the end.
            if FS.mkdir(destination, status.permissions | 0o700) != 0 {
                return reportError("cannot create directory", destination, Errno(rawValue: errno))
            }
            announce(source, destination)
            state.withLock { $0.directories.append((destination, status, status.permissions & ~umask)) }
        } else if settings.preserve {
            state.withLock { $0.directories.append((destination, status, status.permissions)) }
        }
        let names: [FilePath.Component]
        do throws(Errno) { names = try FS.entries(of: source) } catch {
            return reportError("cannot access", source, error)
        }
        for name in names {
            if Task.isCancelled { return }
            await copyItem(joined(source, name), to: joined(destination, name), topLevel: false,
                           inNewDirectory: existing == nil, group: &group, running: &running)
        }
    }

    private func copySymlink(_ source: FilePath, _ status: FileStatus, to destination: FilePath, inNewDirectory: Bool) {
        let link: FilePath
        do throws(Errno) { link = try FS.readLink(source) } catch {
            return reportError("cannot read symbolic link", source, error)
        }
        let existing = inNewDirectory ? nil : try? FileStatus.ifPresent(destination, followingSymlinks: false)
        if let existing {
            if settings.noClobber { return }
            if existing.kind == .directory {
                return report("cannot overwrite directory '\(destination)' with non-directory")
            }
        }
        // A new link beside the old one, renamed over it: never a moment without either.
        let path = existing == nil ? destination : FS.temporaryName(beside: destination)
        if FS.symlink(link, path) != 0 {
            return reportError("cannot create symbolic link", destination, Errno(rawValue: errno))
        }
        if existing != nil && FS.rename(path, destination) != 0 {
            let error = Errno(rawValue: errno)
            _ = FS.unlink(path)
            return reportError("cannot create symbolic link", destination, error)
        }
        if settings.preserve {
            do throws(Errno) { try FS.preserve(status, on: destination, isSymlink: true) } catch {
                reportError("cannot preserve attributes of", destination, error)
            }
        }
        announce(source, destination)
    }

    /// A FIFO or device inside a tree, made anew (as `cp -R` does).
    private func copySpecial(_ source: FilePath, _ status: FileStatus, to destination: FilePath, inNewDirectory: Bool) {
        if !inNewDirectory, let existing = try? FileStatus.ifPresent(destination, followingSymlinks: false) {
            if settings.noClobber { return }
            if existing.kind == .directory {
                return report("cannot overwrite directory '\(destination)' with non-directory")
            }
            _ = FS.unlink(destination)
        }
        let rc = status.kind == .fifo ? FS.mkfifo(destination, status.permissions)
            : FS.mknod(destination, status.mode, dev_t(status.rawDevice))
        if rc != 0 { return reportError("cannot create special file", destination, Errno(rawValue: errno)) }
        if settings.preserve {
            do throws(Errno) { try FS.preserve(status, on: destination) } catch {
                reportError("cannot preserve attributes of", destination, error)
            }
        }
        announce(source, destination)
    }

    // MARK: - regular files

    /// Where and how a file's bytes go.
    struct Plan: Sendable {
        /// The path the new contents end up at (a symlink destination resolved).
        let destination: FilePath
        /// The destination as the user named it, for messages.
        let shownDestination: FilePath
        let existing: FileStatus?
        /// The new file's exact mode.
        let mode: mode_t
    }

    /// cp's checks before a file copy; nil (with a message, or silently for
    /// -n) when the file must not be copied.
    private func plan(_ source: FilePath, _ status: FileStatus, to destination: FilePath, inNewDirectory: Bool) -> Plan? {
        var target = destination
        var existing: FileStatus?
        do throws(Errno) {
            existing = inNewDirectory ? nil : try FileStatus.ifPresent(destination, followingSymlinks: false)
            if let link = existing, link.kind == .symlink {
                // cp writes through a symlink; so do we, by replacing its target.
                guard let resolved = FS.realPath(destination),
                      let status = try FileStatus.ifPresent(resolved, followingSymlinks: true) else {
                    report("not writing through dangling symlink '\(destination)'")
                    return nil
                }
                target = resolved
                existing = status
            }
        } catch {
            reportError("cannot stat", destination, error)
            return nil
        }
        if let existing {
            if existing.kind == .directory {
                report("cannot overwrite directory '\(destination)' with non-directory")
                return nil
            }
            if existing.isSameFile(as: status) {
                report("'\(source)' and '\(destination)' are the same file")
                return nil
            }
            if settings.noClobber { return nil }
            if existing.kind == .regular && !settings.force && FS.access(target, W_OK) != 0 {
                reportError("cannot create regular file", destination, Errno(rawValue: errno))
                return nil
            }
        }
        // cp: a new file gets the source's mode less the umask; an existing one keeps its mode.
        let mode = settings.preserve ? status.permissions
            : existing.map { $0.permissions } ?? (status.permissions & 0o777 & ~umask)
        return Plan(destination: target, shownDestination: destination, existing: existing, mode: mode)
    }

    private func copyFile(_ source: FilePath, _ status: FileStatus, _ plan: Plan) async {
        let copied: Bool
        if status.kind == .regular && status.size > Int64(IO.smallFileLimit) {
            copied = await copyLarge(source, status, plan)
        } else {
            copied = await copySmall(source, status, plan)
        }
        guard copied else { return }
        if settings.preserve {
            do throws(Errno) { try FS.preserve(status, on: plan.destination) } catch {
                reportError("cannot preserve attributes of", plan.shownDestination, error)
            }
        }
        announce(source, plan.shownDestination)
        progress?.fileDone()
        if settings.verify { await verify(source, plan.destination, shown: plan.shownDestination) }
    }

    /// Through `IO.copyFile`: one batch of opens, one linked chain.
    private func copySmall(_ source: FilePath, _ status: FileStatus, _ plan: Plan) async -> Bool {
        let replace = plan.existing != nil
        var atomically = replace && !settings.inPlace && plan.existing?.kind == .regular
        while true {
            let options = IO.CopyOptions(atomically: atomically, exclusive: !replace,
                                         permissions: FilePermissions(rawValue: plan.mode))
            do throws(Errno) {
                let bytes = try await IO.copyFile(from: absolute(source), to: absolute(plan.destination),
                                                  options: options)
                progress?.add(Int(bytes))
                break
            } catch where atomically && (error == .permissionDenied || error == .notPermitted)
                            && FS.access(source, R_OK) == 0 {
                // No temporary file in that directory, but the file itself is writable: as cp, in place.
                atomically = false
            } catch {
                if FS.access(source, R_OK) != 0 {
                    report("cannot open '\(source)' for reading: \(describe(error))")
                } else {
                    reportError(isWriteError(error) ? "error writing" : "cannot create regular file", plan.shownDestination, error)
                }
                return false
            }
        }
        // The kernel applied the umask at creation; the exact mode where it differs.
        if !settings.preserve && (plan.mode & ~umask) != plan.mode && (atomically || !replace) {
            _ = FS.chmod(plan.destination, plan.mode)
        }
        if atomically, let existing = plan.existing { keepOwner(of: existing, on: plan.destination) }
        return true
    }

    /// A replaced file keeps its owner and group, as cp's in-place write does
    /// (where the process may give them; otherwise it owns the new file).
    private func keepOwner(of existing: FileStatus, on path: FilePath, fd: Int32? = nil) {
        guard existing.uid != geteuid() || existing.gid != getegid() else { return }
        if let fd { _ = fchown(fd, existing.uid, existing.gid) } else { _ = FS.chown(path, existing.uid, existing.gid) }
    }

    /// Through two random channels, into a temporary file when one exists already.
    private func copyLarge(_ source: FilePath, _ status: FileStatus, _ plan: Plan) async -> Bool {
        let input = FS.open(source, O_RDONLY | O_CLOEXEC | O_NOCTTY)
        if input < 0 {
            reportError("cannot open", source, Errno(rawValue: errno))
            return false
        }
        defer { close(input) }
        var info = stat()
        fstat(input, &info)
        let size = Int64(info.st_size)
        var useTemporary = plan.existing != nil && !settings.inPlace
        var path = useTemporary ? FS.temporaryName(beside: plan.destination) : plan.destination
        var created = useTemporary || plan.existing == nil
        // Direct writes merge a partial last block: they need to read it.
        let access = settings.direct ? O_RDWR : O_WRONLY
        var output = FS.open(path, access | O_CREAT | O_CLOEXEC | O_NOCTTY | (created ? O_EXCL : O_TRUNC), plan.mode)
        if output < 0 && useTemporary && (errno == EACCES || errno == EPERM) {
            // No temporary file in that directory, but the file itself is writable: as cp, in place.
            (useTemporary, created, path) = (false, false, plan.destination)
            output = FS.open(path, access | O_CREAT | O_CLOEXEC | O_NOCTTY | O_TRUNC, plan.mode)
        }
        if output < 0 {
            reportError("cannot create regular file", plan.shownDestination, Errno(rawValue: errno))
            return false
        }
        if useTemporary, let existing = plan.existing { keepOwner(of: existing, on: path, fd: output) }
        var closed = false
        func abandon(_ what: String, _ shown: FilePath, _ error: Errno) -> Bool {
            if !closed { close(output) }
            if created { _ = FS.unlink(path) }
            reportError(what, shown, error)
            return false
        }
        if created && fchmod(output, plan.mode) != 0 {
            return abandon("cannot set permissions of", plan.shownDestination, Errno(rawValue: errno))
        }
        // The size first: holes stay holes, and the file system sees the whole extent at once.
        if ftruncate(output, off_t(size)) != 0 {
            return abandon("error writing", plan.shownDestination, Errno(rawValue: errno))
        }
        let regions = dataRegions(of: FileDescriptor(rawValue: input), size: size, mayBeSparse: FileStatus(info).mayBeSparse)
        var endedAt: Int64?
        var method = settings.direct ? .channels : settings.method
        if method == .kernel {
            let moved = Counter()
            let ticker = progress.map { bar in Task { await bar.runTicker() } }
            do throws(IO.CopyRangesError) {
                // 4 lanes of 1 MiB pipes: measured best here (2 or 8 lanes no better; 4 MiB pipes 2× slower).
                endedAt = try await IO.copyRanges(regions, from: FileDescriptor(rawValue: input),
                                                  to: FileDescriptor(rawValue: output)) { [progress] n in
                    moved.add(n)
                    progress?.add(n)
                }
            } catch where moved.value == 0 && [.invalidArgument, .notSupported, .noFunction].contains(error.errno) {
                method = .channels  // a file system that cannot splice: the channels can
            } catch {
                ticker?.cancel()
                return error.side == .read ? abandon("error reading", source, error.errno)
                    : abandon("error writing", plan.shownDestination, error.errno)
            }
            ticker?.cancel()
        }
        if method == .channels {
            // A random channel's offsets count from the fd's position when it
            // is made (as in dispatch I/O); SEEK_DATA/SEEK_HOLE moved it.
            lseek(input, 0, SEEK_SET)
            let copy = ChannelCopy(source: FileDescriptor(rawValue: input), destination: FileDescriptor(rawValue: output),
                                   regions: regions, progress: progress, direct: settings.direct)
            do throws(CopyFailure) {
                try await copy.run()
            } catch {
                return error.side == .read ? abandon("error reading", source, error.errno)
                    : abandon("error writing", plan.shownDestination, error.errno)
            }
            endedAt = copy.endedAt
        }
        if let end = endedAt, ftruncate(output, off_t(end)) != 0 {
            return abandon("error writing", plan.shownDestination, Errno(rawValue: errno))
        }
        closed = true
        if close(output) != 0 {
            return abandon("error writing", plan.shownDestination, Errno(rawValue: errno))
        }
        if useTemporary && FS.rename(path, plan.destination) != 0 {
            return abandon("cannot create regular file", plan.shownDestination, Errno(rawValue: errno))
        }
        return true
    }

    private func verify(_ source: FilePath, _ destination: FilePath, shown: FilePath) async {
        do throws(CopyFailure) {
            switch try await Verify.compare(source, destination) {
            case .same:
                break
            case .differentSize(let a, let b):
                report("verify: '\(source)' has \(a) bytes, '\(shown)' has \(b)")
            case .differentAt(let offset):
                report("verify: '\(source)' and '\(shown)' differ at byte \(offset)")
            }
        } catch {
            reportError("verify: cannot read", source, error.errno)
        }
    }

    // MARK: - sizes, for the progress bar

    /// The bytes the copy will move: regular files, followed as the copy follows them.
    static func totalBytes(of sources: [FilePath], recursive: Bool) -> Int64 {
        var total: Int64 = 0
        func walk(_ path: FilePath, topLevel: Bool) {
            guard let status = try? FileStatus.of(path, followingSymlinks: topLevel && !recursive) else { return }
            switch status.kind {
            case .regular:
                total += status.size
            case .directory where recursive:
                for name in (try? FS.entries(of: path)) ?? [] { walk(joined(path, name), topLevel: false) }
            default:
                break
            }
        }
        for source in sources { walk(source, topLevel: true) }
        return total
    }
}

/// Bytes counted from the engine's thread.
final class Counter: Sendable {
    private let count = Mutex(0)
    func add(_ n: Int) { count.withLock { $0 += n } }
    var value: Int { count.withLock { $0 } }
}

private func isWriteError(_ error: Errno) -> Bool {
    [.noSpace, .diskQuotaExceeded, .fileTooLarge, .ioError, .readOnlyFileSystem].contains(error)
}

/// The parent directory of `path` ("." for a bare name).
func parentOf(_ path: FilePath) -> FilePath {
    let parent = path.removingLastComponent()
    return parent.isEmpty ? "." : parent
}

/// strerror's text ("No such file or directory").
func describe(_ error: Errno) -> String {
    String(cString: strerror(error.rawValue))
}

func writeLine(_ fd: Int32, _ line: String) { writeAll(fd, line + "\n") }

/// All of `text` to `fd` (short writes continued, EINTR retried; given up on an error).
func writeAll(_ fd: Int32, _ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return }
        offset += n
    }
}
