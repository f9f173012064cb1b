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
            if existing.isSameFile(as: status) && existing.kind == .regular && !sameName(source, destination)
                && (settings.backup != .none || settings.removeDestination)
                && (try? FileStatus.of(source, followingSymlinks: false))?.isSameFile(as: existing) == true {
                // Two names of one file (a hard link, not reached through a symlink):
                // --backup moves the destination aside, --remove-destination
                // removes it, and the copy is a new file (cp's same_file_ok).
                // The source keeps its name and its data.
            } else if existing.isSameFile(as: status) {
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
        let outcome: FileCopier.Outcome?
        if settings.attributesOnly {
            outcome = createEmpty(plan) ? FileCopier.Outcome(bytes: 0, strategy: .chain, replace: .inPlace) : nil
        } else if plan.stream {
            outcome = await copyStream(source, plan)
        } else {
            outcome = await copyBytes(source, status, plan)
        }
        guard let outcome else { return }
        if !settings.preserve.isEmpty {
            do throws(Errno) { try FS.preserve(status, from: source, on: plan.destination, settings.preserve) } catch {
                reportError("cannot preserve attributes of", plan.shownDestination, error)
            }
        }
        // Owner-only while written (for --preserve=ownership): now the mode it gets.
        if plan.creationMode != plan.mode && !settings.preserve.contains(.mode) && FS.chmod(plan.destination, plan.mode) != 0 {
            reportError("cannot set permissions of", plan.shownDestination, Errno(rawValue: errno))
        }
        if settings.verbose || settings.debug {
            announce(source, plan.shownDestination, how: settings.debug ? debugLine(status, outcome) : nil)
        }
        progress?.fileDone()
        if settings.verify { await verify(source, plan.destination, shown: plan.shownDestination) }
    }

    /// --debug: cp's line (offload: the kernel moved the bytes; sparse
    /// detection: SEEK_DATA), made only when asked (thousands of files).
    private func debugLine(_ status: FileStatus, _ outcome: FileCopier.Outcome) -> String? {
        let how: String = switch outcome.strategy {
        case .chain: "io_uring chain"
        case .copyFileRange: "copy_file_range"
        case .splice: "kernel splice"
        case .stream: settings.sparseAlways ? "read and write, zeros as holes" : "read and write"
        case .channels: settings.sparseAlways ? "channels, zeros as holes" : "channels"
        default: outcome.strategy.rawValue
        }
        let offload = outcome.strategy == .copyFileRange || outcome.strategy == .splice
        let debug = settings.attributesOnly ? nil
            : "copy offload: \(offload ? "yes" : "no"), reflink: \(outcome.strategy == .reflink ? "yes" : "unsupported"), "
                + "sparse detection: \(status.mayBeSparse && !settings.sparseNever ? "SEEK_HOLE" : "no") (ringcp: \(how))"
        return debug
    }

    /// The library's copier, set as cp's flags say.
    func copier(for plan: Plan, atomically: Bool) -> FileCopier {
        var copier = FileCopier()
        copier.replace = atomically ? .atomic : .inPlace
        copier.exclusive = plan.existing == nil
        copier.permissions = FilePermissions(rawValue: plan.creationMode)
        copier.inPlaceIfNoTemporary = true  // as cp: where no file can be made beside it, in place
        copier.reflink = switch settings.reflink {
        case .always: .always
        case .auto: .auto
        default: .never
        }
        copier.sparse = settings.sparseAlways ? .always : settings.sparseNever ? .never : .auto
        copier.directIO = settings.direct
        copier.strategy = switch settings.method {
        case .range: .automatic
        case .kernel: .splice
        case .channels: .channels
        }
        if let bar = progress {
            copier.progress = { @Sendable (bytes: Int) in bar.add(bytes) }
        }
        return copier
    }

    /// A regular file's bytes, through the library's `FileCopier`: a new
    /// file is created exclusively; an existing regular file is replaced
    /// atomically (a new file beside it, renamed onto it), unless --in-place.
    func copyBytes(_ source: FilePath, _ status: FileStatus, _ plan: Plan) async -> FileCopier.Outcome? {
        let replace = plan.existing != nil
        let atomically = replace && !settings.inPlace && plan.existing?.kind == .regular
        let copier = copier(for: plan, atomically: atomically)
        let ticker = progress.flatMap { bar in status.size > Int64(IO.smallFileLimit) ? bar.startTicker() : nil }
        defer { ticker?.cancel() }
        let outcome: FileCopier.Outcome
        do throws(IOError) {
            // A regular file by the lstat just made (cp's): opened with no second stat.
            outcome = status.kind == .regular
                ? try await copier.copy(from: absolute(source), to: absolute(plan.destination), sourceType: .regular)
                : try await copier.copy(from: absolute(source), to: absolute(plan.destination))
        } catch {
            reportCopyError(error, source, plan)
            return nil
        }
        // The kernel applied the umask at creation; the exact mode where it differs.
        let made = outcome.replace == .atomic || !replace
        if !settings.preserve.contains(.mode) && (plan.mode & ~umask) != plan.mode && made {
            _ = FS.chmod(plan.destination, plan.mode)
        }
        if outcome.replace == .atomic, let existing = plan.existing { keepOwner(of: existing, on: plan.destination) }
        return outcome
    }

    /// cp's message for a failed copy.
    func reportCopyError(_ error: IOError, _ source: FilePath, _ plan: Plan) {
        reportCopyError(error, source, shownDestination: plan.shownDestination)
    }

    /// cp's message for a failed copy of `source` to `shownDestination`.
    func reportCopyError(_ error: IOError, _ source: FilePath, shownDestination: FilePath) {
        switch (error.side, error.operation) {
        case (_, .copyOntoSource):
            report("'\(source)' and '\(shownDestination)' are the same file")
        case (_, .copy):
            report("failed to clone '\(shownDestination)' from '\(source)': \(describe(error.errno))")
        case (.source, .read):
            reportError("error reading", source, error.errno)
        case (.source, _) where error.errno == .canceled:
            reportError("cannot open", source, .canceled)  // counted as interrupted, no message
        case (.source, _):
            report("cannot open '\(source)' for reading: \(describe(error.errno))")
        case (_, .setAttributes):
            reportError("cannot set permissions of", shownDestination, error.errno)
        default:
            reportError(error.operation == .write || error.operation == .close || isWriteError(error.errno)
                        ? "error writing" : "cannot create regular file", shownDestination, error.errno)
        }
    }

    /// A replaced file keeps its owner and group, as cp's in-place write does
    /// (where the process may give them; otherwise it owns the new file).
    func keepOwner(of existing: FileStatus, on path: FilePath, fd: Int32? = nil) {
        guard existing.uid != geteuid() || existing.gid != getegid() else { return }
        if let fd { _ = fchown(fd, existing.uid, existing.gid) } else { _ = FS.chown(path, existing.uid, existing.gid) }
    }

    func verify(_ source: FilePath, _ destination: FilePath, shown: FilePath) async {
        do throws(Errno) {
            switch try await Verify.compare(source, destination) {
            case .same:
                break
            case .differentSize(let a, let b):
                report("verify: '\(source)' has \(a) bytes, '\(shown)' has \(b)")
            case .differentAt(let offset):
                report("verify: '\(source)' and '\(shown)' differ at byte \(offset)")
            }
        } catch {
            reportError("verify: cannot read", source, error)
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
}
