#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import SystemPackage

extension Copier {
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
        /// The mode a new file is created with, until its data is in: with
        /// -p, owner-only (as cp: nobody else may open it while it is
        /// written, before its owner and group are set).
        let creationMode: mode_t
        /// A FIFO, a device or a socket on either side: the bytes go as they
        /// come, into the destination itself.
        let stream: Bool
    }

    /// cp's checks before a file copy; nil (with a message, or silently for
    /// -n) when the file must not be copied.
    func plan(_ source: FilePath, _ status: FileStatus, to destination: FilePath, inNewDirectory: Bool) -> Plan? {
        var target = destination
        var existing: FileStatus?
        do throws(Errno) {
            existing = inNewDirectory ? nil : try FileStatus.ifPresent(destination, followingSymlinks: false)
            if let link = existing, link.kind == .symlink {
                // cp never writes through a symlink this run made: with `a/1 -> ../t`
                // and `b/1`, `cp -R a/1 b/1 c` would otherwise write b/1 into ../t.
                if state.withLock({ $0.createdLinks.contains(link.identity) }) {
                    report("will not copy '\(source)' through just-created symlink '\(destination)'")
                    return nil
                }
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
        let creationMode = settings.preserve ? mode & 0o700 : mode
        let special: (FileStatus) -> Bool = { $0.kind != .regular }
        return Plan(destination: target, shownDestination: destination, existing: existing, mode: mode,
                    creationMode: creationMode, stream: special(status) || existing.map(special) == true)
    }

    func copyFile(_ source: FilePath, _ status: FileStatus, _ plan: Plan) async {
        let copied: Bool
        if plan.stream {
            copied = await copyStream(source, plan)
        } else if status.kind == .regular && status.size > Int64(IO.smallFileLimit) {
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
    func copySmall(_ source: FilePath, _ status: FileStatus, _ plan: Plan) async -> Bool {
        let replace = plan.existing != nil
        var atomically = replace && !settings.inPlace && plan.existing?.kind == .regular
        while true {
            let options = IO.CopyOptions(atomically: atomically, exclusive: !replace,
                                         permissions: FilePermissions(rawValue: plan.creationMode))
            do throws(IOError) {
                let bytes = try await IO.copyFile(from: absolute(source), to: absolute(plan.destination),
                                                  options: options)
                progress?.add(Int(bytes))
                break
            } catch where atomically && error.side == .destination && error.operation == .create
                            && (error.errno == .permissionDenied || error.errno == .notPermitted) {
                // No temporary file in that directory, but the file itself is writable: as cp, in place.
                atomically = false
            } catch {
                switch (error.side, error.operation) {
                case (_, .copyOntoSource):
                    report("'\(source)' and '\(plan.shownDestination)' are the same file")
                case (.source, .read):
                    reportError("error reading", source, error.errno)
                case (.source, _) where error.errno == .canceled:
                    reportError("cannot open", source, .canceled)  // counted as interrupted, no message
                case (.source, _):
                    report("cannot open '\(source)' for reading: \(describe(error.errno))")
                default:
                    reportError(error.operation == .write || isWriteError(error.errno) ? "error writing"
                                : "cannot create regular file", plan.shownDestination, error.errno)
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
    func keepOwner(of existing: FileStatus, on path: FilePath, fd: Int32? = nil) {
        guard existing.uid != geteuid() || existing.gid != getegid() else { return }
        if let fd { _ = fchown(fd, existing.uid, existing.gid) } else { _ = FS.chown(path, existing.uid, existing.gid) }
    }

    /// Through two random channels, into a temporary file when one exists already.
    func copyLarge(_ source: FilePath, _ status: FileStatus, _ plan: Plan) async -> Bool {
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
        var output = FS.open(path, access | O_CREAT | O_CLOEXEC | O_NOCTTY | (created ? O_EXCL : O_TRUNC), plan.creationMode)
        if output < 0 && useTemporary && (errno == EACCES || errno == EPERM) {
            // No temporary file in that directory, but the file itself is writable: as cp, in place.
            (useTemporary, created, path) = (false, false, plan.destination)
            output = FS.open(path, access | O_CREAT | O_CLOEXEC | O_NOCTTY | O_TRUNC, plan.creationMode)
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
        if created && fchmod(output, plan.creationMode) != 0 {
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
            do throws(IOError) {
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
                return error.side == .destination ? abandon("error writing", plan.shownDestination, error.errno)
                    : abandon("error reading", source, error.errno)
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

    func verify(_ source: FilePath, _ destination: FilePath, shown: FilePath) async {
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
}
