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
        /// Where the bytes come from when not the source's path (its backup,
        /// for `cp -fb f f`).
        let readFrom: FilePath?
    }

    /// cp's checks before a file copy; nil (with a message, or silently for
    /// -n) when the file must not be copied. Makes a backup or removes the
    /// destination where asked.
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
                guard let resolved = try resolveLink(source, link, at: destination) else { return nil }
                (target, existing) = resolved
            }
        } catch {
            reportError("cannot stat", destination, error)
            return nil
        }
        if let existing {
            // -n skips whatever is there, a directory too (cp: silently, exit 0).
            if settings.noClobber { return nil }
            if existing.kind == .directory {
                report("cannot overwrite directory '\(destination)' with non-directory")
                return nil
            }
            if existing.isSameFile(as: status) {
                // cp's special case: with --force and --backup, a file copied onto
                // itself is backed up, and the copy made from the backup.
                guard settings.force && settings.backup != .none && existing.kind == .regular
                        && sameName(source, destination) else {
                    report("'\(source)' and '\(destination)' are the same file")
                    return nil
                }
                let backup = backupName(for: target)
                if FS.rename(target, backup) != 0 {
                    reportError("cannot backup", destination, Errno(rawValue: errno))
                    return nil
                }
                let mode = settings.preserve.contains(.mode) ? status.permissions : existing.permissions
                return Plan(destination: target, shownDestination: destination, existing: nil, mode: mode,
                            creationMode: mode, stream: false, readFrom: backup)
            }
            switch settings.update {
            case .all: break
            case .none:
                if settings.debug { say("skipped '\(destination)'") }
                return nil
            case .noneFail:
                report("not replacing '\(destination)'")
                return nil
            case .older:
                let (a, b) = (existing.modificationTime, status.modificationTime)
                if (a.tv_sec, a.tv_nsec) >= (b.tv_sec, b.tv_nsec) {
                    if settings.debug { say("skipped '\(destination)'") }
                    return nil
                }
            }
            if settings.interactive && !ask("overwrite '\(destination)'? ") {
                state.withLock { $0.failed = true }  // not replaced: cp exits 1, with no message
                return nil
            }
            if existing.kind == .regular && !settings.force && FS.access(target, W_OK) != 0
                && settings.backup == .none && !settings.removeDestination {
                reportError("cannot create regular file", destination, Errno(rawValue: errno))
                return nil
            }
        }
        // --backup, --remove-destination: the old file goes, the copy is a new file.
        if let old = existing, old.kind == .regular || old.kind == .symlink {
            if settings.backup != .none {
                let backup = backupName(for: target)
                if let there = try? FileStatus.ifPresent(backup, followingSymlinks: false), there.isSameFile(as: status) {
                    report("backing up '\(destination)' might destroy source;  '\(source)' not copied")
                    return nil
                }
                if FS.rename(target, backup) != 0 {
                    reportError("cannot backup", destination, Errno(rawValue: errno))
                    return nil
                }
                existing = nil
            } else if settings.removeDestination {
                if FS.unlink(target) != 0 && errno != ENOENT {
                    reportError("cannot remove", destination, Errno(rawValue: errno))
                    return nil
                }
                existing = nil
            }
        }
        // cp: a new file gets the source's mode less the umask; an existing one keeps its mode.
        let keepsMode = settings.preserve.contains(.mode)
        let mode = keepsMode ? status.permissions
            : existing.map { $0.permissions }
            ?? (settings.defaultModes.contains(.mode) ? 0o666 & ~umask : status.permissions & 0o777 & ~umask)
        let creationMode = keepsMode || settings.preserve.contains(.ownership) ? mode & 0o700 : mode
        let special: (FileStatus) -> Bool = { $0.kind != .regular }
        return Plan(destination: target, shownDestination: destination, existing: existing, mode: mode,
                    creationMode: creationMode, stream: special(status) || existing.map(special) == true, readFrom: nil)
    }

    /// Where the bytes go when the destination is a symlink (cp writes
    /// through it): its target and what is there; nil (with a message) when
    /// nothing may be written.
    private func resolveLink(_ source: FilePath, _ link: FileStatus, at destination: FilePath) throws(Errno)
        -> (FilePath, FileStatus?)? {
        if settings.removeDestination || settings.backup != .none { return (destination, link) }
        do throws(Errno) {
            let followed = try FileStatus.of(destination, followingSymlinks: true)
            return (FS.realPath(destination) ?? destination, followed)
        } catch .noSuchFileOrDirectory {
            // Dangling: cp refuses, but for POSIXLY_CORRECT, which makes the link's target.
            guard settings.posixlyCorrect else {
                report("not writing through dangling symlink '\(destination)'")
                return nil
            }
            let pointee = try FS.readLink(destination)
            return (pointee.isAbsolute ? pointee : parentOf(destination).pushing(pointee), nil)
        } catch .tooManySymbolicLinkLevels {
            // A loop: cp -f replaces the link itself; without -f, the open fails as cp's does.
            guard settings.force else {
                reportError("cannot create regular file", destination, .tooManySymbolicLinkLevels)
                return nil
            }
            if FS.unlink(destination) != 0 { throw Errno(rawValue: errno) }
            return (destination, nil)
        }
    }

    func copyFile(_ named: FilePath, _ status: FileStatus, _ plan: Plan) async {
        let source = plan.readFrom ?? named
        let copied: Bool
        var how = "copy_file_range"
        if settings.attributesOnly {
            copied = createEmpty(plan)
            how = "attributes only"
        } else if plan.stream {
            copied = await copyStream(source, plan)
            how = "read and write"
        } else if settings.sparseAlways && status.kind == .regular {
            copied = await copyStream(source, plan, holes: true)
            how = "read and write, zeros as holes"
        } else if settings.reflink == .always {
            copied = clone(source, plan)
            how = "reflink"
        } else if status.kind == .regular && status.size > Int64(IO.smallFileLimit) {
            copied = await copyLarge(source, status, plan, how: &how)
        } else {
            copied = await copySmall(source, status, plan)
            how = "io_uring chain"
        }
        guard copied else { return }
        if !settings.preserve.isEmpty {
            do throws(Errno) { try FS.preserve(status, from: source, on: plan.destination, settings.preserve) } catch {
                reportError("cannot preserve attributes of", plan.shownDestination, error)
            }
        }
        // Owner-only while written (for --preserve=ownership): now the mode it gets.
        if plan.creationMode != plan.mode && !settings.preserve.contains(.mode) && FS.chmod(plan.destination, plan.mode) != 0 {
            reportError("cannot set permissions of", plan.shownDestination, Errno(rawValue: errno))
        }
        // --debug: cp's line (offload: the kernel moved the bytes; sparse detection: SEEK_DATA).
        let debug = settings.attributesOnly ? nil
            : "copy offload: \(how == "kernel splice" || how == "copy_file_range" ? "yes" : "no"), reflink: \(how == "reflink" ? "yes" : "unsupported"), "
                + "sparse detection: \(status.mayBeSparse && !settings.sparseNever ? "SEEK_HOLE" : "no") (ringcp: \(how))"
        announce(source, plan.shownDestination, how: settings.debug ? debug : nil)
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
        if !settings.preserve.contains(.mode) && (plan.mode & ~umask) != plan.mode && (atomically || !replace) {
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
    func copyLarge(_ source: FilePath, _ status: FileStatus, _ plan: Plan, how: inout String) async -> Bool {
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
        // --reflink=auto: the source's blocks shared, where the file system can (btrfs, XFS).
        if settings.reflink == .auto && ioctl(output, UInt(ficlone), input) == 0 {
            how = "reflink"
            closed = true
            if close(output) != 0 { return abandon("error writing", plan.shownDestination, Errno(rawValue: errno)) }
            if useTemporary && FS.rename(path, plan.destination) != 0 {
                return abandon("cannot create regular file", plan.shownDestination, Errno(rawValue: errno))
            }
            progress?.add(Int(size))
            return true
        }
        // The size first: holes stay holes, and the file system sees the whole extent at once.
        if ftruncate(output, off_t(size)) != 0 {
            return abandon("error writing", plan.shownDestination, Errno(rawValue: errno))
        }
        // --sparse=never: the holes written as zeros.
        let regions = settings.sparseNever ? [0..<size]
            : dataRegions(of: FileDescriptor(rawValue: input), size: size, mayBeSparse: FileStatus(info).mayBeSparse)
        var endedAt: Int64?
        var method = settings.direct ? .channels : settings.method
        if method == .range {
            how = "copy_file_range"
            let ticker = progress.map { bar in Task { await bar.runTicker() } }
            defer { ticker?.cancel() }
            do throws(IOError) {
                endedAt = try await IO.copyFileRange(regions, from: FileDescriptor(rawValue: input),
                                                     to: FileDescriptor(rawValue: output)) { [progress] in progress?.add($0) }
            } catch where error.operation == .copy {
                method = .kernel  // file systems that cannot: spliced through pipes, or else the channels
            } catch {
                return error.side == .destination ? abandon("error writing", plan.shownDestination, error.errno)
                    : abandon("error reading", source, error.errno)
            }
        }
        if method == .kernel {
            how = "kernel splice"
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
            how = "channels"
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

    /// --attributes-only: the file made (or kept) without data.
    func createEmpty(_ plan: Plan) -> Bool {
        let fd = FS.open(plan.destination, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, plan.creationMode)
        if fd < 0 {
            reportError("cannot create regular file", plan.shownDestination, Errno(rawValue: errno))
            return false
        }
        close(fd)
        return true
    }

    /// --reflink=always: the source's blocks shared (FICLONE), or an error, as cp.
    func clone(_ source: FilePath, _ plan: Plan) -> Bool {
        let input = FS.open(source, O_RDONLY | O_CLOEXEC | O_NOCTTY)
        if input < 0 {
            report("cannot open '\(source)' for reading: \(describe(Errno(rawValue: errno)))")
            return false
        }
        defer { close(input) }
        let created = plan.existing == nil
        let output = FS.open(plan.destination, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | (created ? O_EXCL : O_TRUNC),
                             plan.creationMode)
        if output < 0 {
            reportError("cannot create regular file", plan.shownDestination, Errno(rawValue: errno))
            return false
        }
        if ioctl(output, UInt(ficlone), input) != 0 {
            let error = Errno(rawValue: errno)
            close(output)
            if created { _ = FS.unlink(plan.destination) }
            report("failed to clone '\(plan.shownDestination)' from '\(source)': \(describe(error))")
            return false
        }
        return close(output) == 0
    }
}

/// FICLONE, _IOW(0x94, 9, int): the destination shares the source's blocks.
let ficlone: UInt32 = 0x4004_9409
