#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import Synchronization
import SystemPackage

/// Copies each source by cp's rules. A tree (-r) is walked and copied by
/// the library's `IO.copyItem`, which asks this copier about each entry
/// (`copyEntry`) and each failure (reported, then the copy goes on, as cp).
/// Without -r, small regular files run `jobs` at a time (their requests
/// share the ring's batches); a large file runs alone.
final class Copier: Sendable {
    let settings: Settings
    let progress: Progress?
    /// The process's umask, read once at start.
    let umask: mode_t
    /// The working directory, for the library calls, which take absolute paths.
    private let cwd: FilePath
    let state = Mutex(State())
    /// The small-file copies that may run at once (`--jobs`): one count per copy.
    private let slots: IOSemaphore
    /// A regular file of a tree that lands in a directory this run made is
    /// left to `IO.copyItem` (which copies a directory's small files in
    /// batches, by their names in the two directories): nothing can be at
    /// its destination, so cp has nothing to check, and the flags ask
    /// nothing of it that the library does not do. Not with -p or any
    /// --preserve, -l, -s, -v, --debug, --verify, --attributes-only,
    /// --no-preserve, --sparse, --reflink=always, --method, --direct or a
    /// progress bar.
    private let treeCopiesFiles: Bool

    /// A directory this run made, keyed by its path with the hash computed
    /// once, outside the state's lock (a path hashes byte by byte).
    struct MadeDirectory: Hashable {
        let path: FilePath
        let hash: Int

        init(_ path: FilePath) {
            self.path = path
            hash = path.hashValue
        }

        static func == (a: MadeDirectory, b: MadeDirectory) -> Bool { a.hash == b.hash && a.path == b.path }
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
    }

    struct State {
        var failed = false
        var stdoutFailed = false
        /// A signal cut a copy short, or kept one from starting.
        var interrupted = false
        /// The symlinks this run made (cp never writes through one of them:
        /// two sources may not land on the same name, one as a link).
        var createdLinks: Set<FileIdentity> = []
        /// The first copy of each source with more than one name (--preserve=links).
        var copies: [FileIdentity: FirstCopy] = [:]
        /// The directories this run made (nothing was in them before).
        var madeDirectories: Set<MadeDirectory> = []
        /// Directories whose mode (and times, with -p) are set once their contents are in.
        var directories: [(path: FilePath, source: FileStatus, sourcePath: FilePath, mode: mode_t)] = []
    }

    init(settings: Settings, progress: Progress?) {
        self.settings = settings
        self.progress = progress
        let mask = Glibc.umask(0)
        _ = Glibc.umask(mask)
        umask = mask
        slots = IOSemaphore(value: max(1, settings.jobs))
        treeCopiesFiles = settings.preserve.isEmpty && settings.defaultModes.isEmpty && settings.link == .none
            && !settings.verbose && !settings.debug && !settings.verify && !settings.attributesOnly
            && !settings.sparseAlways && !settings.sparseNever && settings.reflink != .always
            && settings.method == .range && !settings.direct && progress == nil
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        cwd = getcwd(&buffer, buffer.count) != nil
            ? buffer.withUnsafeBufferPointer { FilePath(platformString: $0.baseAddress!) } : "/"
    }

    var failed: Bool { state.withLock { $0.failed } }
    var interrupted: Bool { state.withLock { $0.interrupted } }

    /// One line on stderr; the exit status becomes 1.
    func report(_ message: String) {
        state.withLock { $0.failed = true }
        writeLine(STDERR_FILENO, "\(programName): \(message)")
    }

    func reportError(_ what: String, _ path: FilePath, _ error: Errno) {
        if error == .canceled {
            state.withLock { $0.interrupted = true }
            return
        }
        report("\(what) '\(path)': \(describe(error))")
    }

    func announce(_ source: FilePath, _ destination: FilePath, how: String? = nil) {
        guard settings.verbose || settings.debug else { return }
        say("'\(source)' -> '\(destination)'" + (how.map { "\n" + $0 } ?? ""))
    }

    /// A line on stdout (-v, --debug); a failed write (a full disk, a closed
    /// pipe) is reported once and makes the exit status 1, as in cp.
    func say(_ line: String) {
        if !writeLine(STDOUT_FILENO, line) {
            let error = Errno(rawValue: errno)
            let first = state.withLock { s -> Bool in
                defer { s.stdoutFailed = true }
                return !s.stdoutFailed
            }
            if first { report("write error: \(describe(error))") }
        }
    }

    func absolute(_ path: FilePath) -> FilePath {
        path.isAbsolute ? path : cwd.pushing(path)
    }

    /// A directory made for `source` outside the walk (--parents): its mode
    /// (and with -p its other attributes) set at the end, with the others.
    func madeDirectory(_ path: FilePath, for source: FilePath) {
        guard let status = try? FileStatus.of(source, followingSymlinks: true) else { return }
        let mode = settings.defaultModes.contains(.mode) ? 0o777 & ~umask : status.permissions & 0o777 & ~umask
        state.withLock { $0.directories.append((path, status, source, mode)) }
    }

    // MARK: - the walk

    /// A source named on the command line, where it goes, and whether a symlink there is followed.
    struct Operand: Sendable {
        let source: FilePath
        let destination: FilePath
        let follow: Bool
    }

    /// The first copy of a file with more than one name: its destination,
    /// and its end (a second name is linked to it once it is complete).
    final class FirstCopy: Sendable {
        let destination: FilePath
        private let done = IOSemaphore(value: 0)
        init(_ destination: FilePath) { self.destination = destination }
        func finish() { done.signal() }
        /// Until the first copy is done (or the task is cancelled).
        func wait() async {
            guard (try? await done.wait()) != nil else { return }
            done.signal()  // for the next name, if any
        }
    }

    func copy(_ operands: [Operand]) async {
        await withDiscardingTaskGroup { group in
            for operand in operands {
                if Task.isCancelled {
                    state.withLock { $0.interrupted = true }
                    break
                }
                if settings.recursive {
                    await copyTree(operand)
                } else {
                    await copyItem(operand.source, to: operand.destination, follow: operand.follow,
                                   alone: operands.count == 1, group: &group)
                }
            }
        }
        // A signal that came once every copy was done (a file renamed into
        // place) interrupted nothing: `interrupted` says only what was cut short.
        // Directory modes and times last, deepest first: adding entries changes a directory's mtime.
        let directories = state.withLock { $0.directories }
        for (path, source, sourcePath, mode) in directories.reversed() {
            if !settings.preserve.contains(.mode) && FS.chmod(path, mode) != 0 {
                reportError("cannot set permissions of", path, Errno(rawValue: errno))
            }
            if !settings.preserve.isEmpty {
                do throws(Errno) { try FS.preserve(source, from: sourcePath, on: path, settings.preserve) } catch {
                    reportError("cannot preserve attributes of", path, error)
                }
            }
        }
    }

    /// A source without -r, by cp's rules: a directory is omitted; a small
    /// regular file runs as a child task (`jobs` at once), unless `alone`
    /// (`ringcp SRC DST`: in this task, a task and a thread hop less).
    private func copyItem(_ source: FilePath, to destination: FilePath, follow: Bool, alone: Bool,
                          group: inout DiscardingTaskGroup) async {
        let status: FileStatus
        do throws(Errno) {
            status = try FileStatus.of(source, followingSymlinks: follow)
        } catch {
            return reportError("cannot stat", source, error)
        }
        if status.kind == .directory { return report("-r not specified; omitting directory '\(source)'") }
        let linked = settings.preserve.contains(.links) && (status.links > 1 || follow)
        if status.kind == .regular && status.size <= Int64(IO.smallFileLimit) && !linked && !alone
            && settings.link == .none {
            // A free slot, or a wait for a running copy to end.
            do {
                try await slots.wait()
            } catch {
                // A signal cancelled the copy: this one does not start.
                state.withLock { $0.interrupted = true }
                return
            }
            group.addTask {
                _ = await self.copyEntry(source, status, to: destination, follow: follow, inNewDirectory: false)
                self.slots.signal()
            }
        } else {
            _ = await copyEntry(source, status, to: destination, follow: follow, inNewDirectory: false)
        }
    }

    /// A source with -r: `IO.copyItem` walks it (in parallel, bounded) and
    /// asks `copyEntry` about each entry; a failure of the walk (a directory
    /// that cannot be read) is reported and the copy goes on, as cp's.
    private func copyTree(_ operand: Operand) async {
        var options = IO.CopyOptions()
        options.followSymlinks = !operand.follow ? .never : settings.dereference == .always ? .always : .source
        // -i asks one question at a time, in the walk's order.
        options.maximumConcurrentCopies = settings.interactive ? 1 : max(1, settings.jobs)
        // The files it copies (`treeCopiesFiles`) as cp makes a new file: created
        // exclusively, the source's permission bits under the umask, no set-ID or sticky bit.
        options.exclusive = true
        options.copiesSpecialModeBits = false
        options.reflink = settings.reflink == .never ? .never : .auto
        do throws(IOError) {
            try await IO.copyItem(from: operand.source, to: operand.destination, options: options, onEntry: { entry in
                await self.copyEntry(entry, followingTop: operand.follow)
            }, onError: { error in
                self.reportTreeError(error, operand)
                return .continue
            })
        } catch {
            reportTreeError(error, operand)  // only a cancellation: onError goes on after anything else
        }
    }

    /// cp's message for a failure of the walk, or of a file the library copied.
    private func reportTreeError(_ error: IOError, _ operand: Operand) {
        let path = error.path ?? ""
        let fileCopy: Set<IOError.Operation> = [.openForReading, .read, .create, .openForWriting, .write, .close,
                                                .setAttributes, .copyOntoSource, .copy, .rename]
        if fileCopy.contains(error.operation), let side = error.side {
            // The other side's path: the same names under the other operand.
            var names = path
            let (from, to) = side == .source ? (operand.source, operand.destination) : (operand.destination, operand.source)
            guard names.removePrefix(from) else { return reportError("cannot copy", path, error.errno) }
            let other = to.appending(names.components)
            return side == .source ? reportCopyError(error, path, shownDestination: other)
                : reportCopyError(error, other, shownDestination: path)
        }
        switch error.operation {
        case .stat: reportError("cannot stat", path, error.errno)
        // -L: a symlink to a directory that contains it.
        case .list where error.errno == .tooManySymbolicLinkLevels:
            report("cannot copy cyclic symbolic link '\(path)'")
        case .list: reportError("cannot access", path, error.errno)
        default: reportError("cannot copy", path, error.errno)
        }
    }

    /// One entry of a tree, by cp's rules.
    private func copyEntry(_ entry: IO.CopyItemEntry, followingTop: Bool) async -> IO.CopyItemAction {
        if Task.isCancelled {
            state.withLock { $0.interrupted = true }
            return .skip
        }
        let follow = entry.isTop ? followingTop : settings.dereference == .always
        // The parent's key (and its hash) made before the lock: every entry
        // of a tree asks, from several tasks at once.
        let inNewDirectory: Bool
        if entry.isTop {
            inNewDirectory = false
        } else {
            let parent = MadeDirectory(entry.destination.removingLastComponent())
            inNewDirectory = state.withLock { $0.madeDirectories.contains(parent) }
        }
        // Nothing is there, nothing to check: the library copies it (with the others of its directory).
        if inNewDirectory && entry.type == .regular && treeCopiesFiles { return .copy }
        let status: FileStatus
        do throws(Errno) {
            status = try FileStatus.of(entry.source, followingSymlinks: follow)
        } catch {
            reportError("cannot stat", entry.source, error)
            return .skip
        }
        let descend = await copyEntry(entry.source, status, to: entry.destination, follow: follow,
                                      inNewDirectory: inNewDirectory)
        return descend ? .copied : .skip
    }

    /// - Parameter inNewDirectory: the destination's directory was made by
    ///   this run, so nothing can be at `destination` (an exclusive create
    ///   still catches a race): no need to look.
    /// - Parameter follow: a symlink at `source` is followed (-L, -H on the
    ///   command line, and without -R or -P).
    /// - Returns: for a directory, whether its entries go into `destination` (made, or there already).
    private func copyEntry(_ source: FilePath, _ status: FileStatus, to destination: FilePath, follow: Bool,
                           inNewDirectory: Bool) async -> Bool {
        var first: FirstCopy?
        if status.kind != .directory {
            // -l, -s: a link in place of a copy.
            if settings.link != .none {
                makeLink(source, status, to: destination, inNewDirectory: inNewDirectory, follow: follow)
                return false
            }
            // --preserve=links: a second name of a file already copied is linked to its copy.
            // (A file reached through a followed symlink may be reached again by its own name.)
            if settings.preserve.contains(.links) && (status.links > 1 || follow) {
                let made = FirstCopy(destination)
                let earlier = state.withLock { s -> FirstCopy? in
                    if let earlier = s.copies[status.identity] { return earlier }
                    s.copies[status.identity] = made
                    return nil
                }
                if let earlier {
                    await earlier.wait()
                    linkToCopy(earlier.destination, source, to: destination, inNewDirectory: inNewDirectory)
                    return false
                }
                first = made
            }
        }
        defer { first?.finish() }
        switch status.kind {
        case .directory:
            return makeDirectory(source, status, to: destination, inNewDirectory: inNewDirectory)
        case .symlink:
            copySymlink(source, status, to: destination, inNewDirectory: inNewDirectory)
        case .regular:
            guard let plan = plan(source, status, to: destination, inNewDirectory: inNewDirectory) else { return false }
            await copyFile(source, status, plan)
        case .fifo, .characterDevice, .blockDevice, .socket, .other:
            if settings.recursive && !settings.copyContents {
                copySpecial(source, status, to: destination, inNewDirectory: inNewDirectory)
            } else if let plan = plan(source, status, to: destination, inNewDirectory: inNewDirectory) {
                await copyFile(source, status, plan)  // cp copies the contents: read until EOF
            }
        }
        return false
    }

    /// A directory of a tree: made (owner-only until the end), or the one
    /// there used. - Returns: whether its entries go into it.
    private func makeDirectory(_ source: FilePath, _ status: FileStatus, to destination: FilePath,
                               inNewDirectory: Bool) -> Bool {
        var existing: FileStatus?
        do throws(Errno) {
            existing = inNewDirectory ? nil : try FileStatus.ifPresent(destination, followingSymlinks: false)
            // A symlink to a directory is followed only with --keep-directory-symlink.
            if existing?.kind == .symlink && settings.keepDirectorySymlink,
               let followed = try FileStatus.ifPresent(destination, followingSymlinks: true), followed.kind == .directory {
                existing = followed
            }
        } catch {
            reportError("cannot stat", destination, error)
            return false
        }
        if let existing, existing.kind != .directory {
            report("cannot overwrite non-directory '\(destination)' with directory '\(source)'")
            return false
        }
        if !inNewDirectory, let from = FS.realPath(source),
           let into = FS.realPath(existing == nil ? parentOf(destination) : destination) {
            let target = existing == nil ? joined(into, lastComponentOf: destination) : into
            if target.starts(with: from) {
                report("cannot copy a directory, '\(source)', into itself, '\(destination)'")
                return false
            }
        }
        if existing == nil {
            // Owner-only while the contents go in (nobody else may enter or
            // write it meanwhile, as cp); the real mode is set at the end.
            if FS.mkdir(destination, 0o700) != 0 {
                reportError("cannot create directory", destination, Errno(rawValue: errno))
                return false
            }
            announce(source, destination)
            // Without -p, cp gives a new directory the source's permission bits
            // less the umask, not its setuid, setgid or sticky bits; a setgid
            // bit the directory inherited from its parent stays.
            let inherited = (try? FileStatus.of(destination, followingSymlinks: false).permissions) ?? 0
            let mode = settings.defaultModes.contains(.mode) ? 0o777 & ~umask
                : (status.permissions & 0o777 & ~umask) | (inherited & S_ISGID)
            state.withLock {
                $0.directories.append((destination, status, source, mode))
                _ = $0.madeDirectories.insert(MadeDirectory(destination))
            }
        } else if !settings.preserve.isEmpty {
            state.withLock { $0.directories.append((destination, status, source, existing!.permissions)) }
        }
        return true
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
            // The link would replace the very file it names (`cp -d link target`): a loop, the data lost.
            if existing.kind != .symlink, let named = try? FileStatus.of(source, followingSymlinks: true),
               named.isSameFile(as: existing) {
                guard settings.backup != .none else {
                    return report("'\(source)' and '\(destination)' are the same file")
                }
                if FS.rename(destination, backupName(for: destination)) != 0 {
                    return reportError("cannot backup", destination, Errno(rawValue: errno))
                }
            } else if settings.backup != .none {
                // Any other destination is backed up, unless it is the source's own name.
                if sameName(source, destination) { return report("'\(source)' and '\(destination)' are the same file") }
                if FS.rename(destination, backupName(for: destination)) != 0 {
                    return reportError("cannot backup", destination, Errno(rawValue: errno))
                }
            }
            // --attributes-only never replaces a file's data (its data is no attribute) but for --remove-destination.
            if settings.attributesOnly && !settings.removeDestination {
                return report("cannot create symbolic link '\(destination)': File exists")
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
        if let made = try? FileStatus.of(destination, followingSymlinks: false), made.kind == .symlink {
            state.withLock { _ = $0.createdLinks.insert(made.identity) }
        }
        if !settings.preserve.isEmpty {
            do throws(Errno) { try FS.preserve(status, on: destination, settings.preserve, isSymlink: true) } catch {
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
        if !settings.preserve.isEmpty {
            do throws(Errno) { try FS.preserve(status, from: source, on: destination, settings.preserve) } catch {
                reportError("cannot preserve attributes of", destination, error)
            }
        }
        announce(source, destination)
    }
}
