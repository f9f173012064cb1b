#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import SystemPackage

extension Options {
    /// The settings the flags make, by cp's rules (later flags do not override earlier ones
    /// here, but each has one meaning).
    func makeSettings() -> Settings {
        var settings = Settings(method: CopyMethod(rawValue: method) ?? .range, direct: direct,
                                recursive: recursive || archive,
                                noClobber: noClobber && !(interactive && RingCP.interactiveLast == true),
                                force: force && !noClobber, verbose: verbose, inPlace: inPlace, verify: verify, jobs: jobs)
        if preserve { settings.preserve.formUnion(.standard) }
        if archive { settings.preserve.formUnion(.all) }
        if noDereferenceKeepLinks { settings.preserve.insert(.links) }
        // --preserve and --no-preserve in the order given: the later one wins.
        for (list, keep) in RingCP.preserveOrder {
            guard case .success(let set) = Preserve.parse(list) else { continue }
            if keep {
                settings.preserve.formUnion(set)
                settings.defaultModes.subtract(set)
            } else {
                settings.preserve.subtract(set)
                settings.defaultModes.formUnion(set)
            }
        }
        settings.dereference = settings.recursive || noDereference || noDereferenceKeepLinks || archive ? .never : .always
        if dereferenceCommandLine { settings.dereference = .commandLine }
        if dereference { settings.dereference = .always }
        if noDereference || noDereferenceKeepLinks { settings.dereference = .never }
        settings.link = hardLink ? .hard : symbolicLink ? .symbolic : .none
        // -l follows the symlinks it is given (with -R: those on the command line), unless told otherwise.
        if hardLink && !(noDereference || noDereferenceKeepLinks || dereference || dereferenceCommandLine || archive) {
            settings.dereference = settings.recursive ? .commandLine : .always
        }
        if let update { settings.update = Update(rawValue: update) ?? .all }
        if updateShort { settings.update = .older }
        if let backupControl { settings.backup = BackupControl(backupControl) ?? .existing }
        if backupShort && backupControl == nil {
            settings.backup = ProcessEnvironment.value("VERSION_CONTROL").flatMap(BackupControl.init) ?? .existing
        }
        if settings.backup == .none && suffix != nil && backupShort { settings.backup = .existing }
        settings.suffix = suffix ?? ProcessEnvironment.value("SIMPLE_BACKUP_SUFFIX") ?? "~"
        settings.removeDestination = removeDestination
        settings.attributesOnly = attributesOnly
        settings.copyContents = copyContents
        settings.parents = parents
        settings.interactive = interactive && !(noClobber && RingCP.interactiveLast == false)
        settings.keepDirectorySymlink = keepDirectorySymlink
        settings.reflink = Reflink(rawValue: reflink) ?? .auto
        settings.sparseNever = sparse == "never"
        settings.sparseAlways = sparse == "always"
        settings.debug = debug
        settings.posixlyCorrect = ProcessEnvironment.value("POSIXLY_CORRECT") != nil
        return settings
    }

    /// Copies what the options say.
    /// - Returns: the exit status: 0, 1 when anything failed, 128 + the
    ///   signal's number when a signal cut the copy short.
    func execute() -> Int32 {
        // The operands as the kernel gave them: a name that is not UTF-8
        // reaches the file system byte for byte (the parser saw it repaired).
        var raw = RawArguments()
        let rawTargetDirectory = targetDirectory.map { raw.path($0) }
        var rawOperands = paths.map { raw.path($0) }
        var sources = paths
        let target: String
        let rawTarget: FilePath
        if let directory = targetDirectory, let rawDirectory = rawTargetDirectory {
            if noTargetDirectory { fail("cannot combine --target-directory (-t) and --no-target-directory (-T)") }
            target = directory
            rawTarget = rawDirectory
        } else {
            guard paths.count >= 2 else {
                fail(paths.isEmpty ? "missing file operand" : "missing destination file operand after '\(paths[0])'")
            }
            target = sources.removeLast()
            rawTarget = rawOperands.removeLast()
        }
        if sources.isEmpty { fail("missing file operand") }

        // What goes where, by cp's rules.
        let settings = makeSettings()
        var pairs: [(FilePath, FilePath)] = []
        var targetError: Errno?
        var targetIsDirectory = false
        do throws(Errno) {
            targetIsDirectory = try FileStatus.ifPresent(rawTarget, followingSymlinks: true)?.kind == .directory
        } catch {
            targetError = error
        }
        if targetDirectory != nil, let targetError {
            // An unsearchable directory on the way: the reason, not "not a directory".
            failPlain("target directory '\(target)': \(describe(targetError))")
        }
        var madeParents: [(made: FilePath, from: FilePath)] = []
        if parents {
            guard targetIsDirectory else { fail("with --parents, the destination must be a directory") }
            for source in rawOperands {
                // Nothing made for a source that is not there (`f/g` with f a file): its copy reports it.
                guard (try? FileStatus.of(source, followingSymlinks: false)) != nil else { continue }
                // The source's directories under the target, made as needed:
                // owner-only until the end, then their modes (and more, with -p) as cp gives them.
                var directory = rawTarget
                var sourceDirectory = FilePath(root: source.root, [])
                for component in source.removingLastComponent().components {
                    directory = directory.appending(component)
                    sourceDirectory = sourceDirectory.appending(component)
                    // With -p, cp gives the source's attributes to those that were there too.
                    if FS.mkdir(directory, 0o700) == 0 || (errno == EEXIST && !settings.preserve.isEmpty) {
                        madeParents.append((directory, sourceDirectory))
                    } else if errno != EEXIST {
                        failPlain("cannot make directory '\(directory)': \(describe(Errno(rawValue: errno)))")
                    }
                }
            }
            pairs = rawOperands.map { ($0, rawTarget.pushing(FilePath(root: nil, $0.components))) }
        } else if noTargetDirectory {
            if sources.count > 1 { fail("extra operand '\(sources[1])'") }
            pairs = [(rawOperands[0], rawTarget)]
        } else if targetIsDirectory {
            pairs = rawOperands.map { ($0, joined(rawTarget, lastComponentOf: $0)) }
        } else if targetDirectory != nil || sources.count > 1 {
            fail("target '\(target)' is not a directory")
        } else {
            pairs = [(rawOperands[0], rawTarget)]
        }
        // "name/" that is not a directory takes only a directory (FilePath drops the slash).
        if !targetIsDirectory && target.hasSuffix("/"),
           let kind = try? FileStatus.of(rawOperands[0], followingSymlinks: !recursive).kind, kind != .directory {
            failPlain("cannot create regular file '\(target)': Not a directory")
        }
        // "link/" names what the link points to, whatever -P says.
        let follow = zip(sources, rawOperands).map { text, _ in settings.dereference != .never || text.hasSuffix("/") }
        let showProgress = progress ?? (isatty(STDOUT_FILENO) == 1)
        let bar = showProgress ? Progress(totalBytes: Copier.totalBytes(of: pairs.map(\.0), recursive: settings.recursive)) : nil
        let copier = Copier(settings: settings, progress: bar)
        for (made, from) in madeParents { copier.madeDirectory(made, for: from) }

        // Signals are caught before the first byte moves: from here on, one
        // is a byte in a pipe that this (the main) thread reads while the copy
        // runs; no thread of its own, no Dispatch.
        let signals = Interrupts.install()
        let stop = StopSwitch()
        let operands = zip(pairs, follow).map { Copier.Operand(source: $0.0, destination: $0.1, follow: $1) }
        // The copy's tasks run on RingIO's worker pool, whose threads deliver
        // its completions anyway: Swift's global executor (Dispatch's threads)
        // is never started. One small regular file runs on this thread
        // instead, as cp: no thread started, no hand-off (MainThread.swift).
        let mainThread = Self.copiesOnMainThread(operands, settings) ? MainThreadExecutor { signals.wakeForJobs() } : nil
        let executor: any TaskExecutor = mainThread ?? IOQueue.global
        let work = Task(executorPreference: executor) {
            await copier.copy(operands)
            signals.finished()
        }
        stop.attach(work)
        if let mainThread {
            // A signal already caught cancels the copy before it starts, as
            // `wait` would have (the copy's calls then run without a look at the pipe).
            if let number = signals.caught { stop.fire(number) }
            mainThread.runJobs()
        }
        signals.wait(running: mainThread) { number in stop.fire(number) }
        bar?.finish()
        if let bar, !copier.interrupted {
            let seconds = bar.elapsedSeconds
            let rate = Double(bar.bytesDone) / max(seconds, 1e-9)
            print("copied \(formatBytes(bar.bytesDone)) in \(fixed(seconds, 2)) s (\(formatBytes(Int64(rate)))/s)")
        }
        if copier.interrupted {
            copier.report("interrupted; nothing half-copied is left behind")
            return 128 + (stop.signal ?? SIGINT)
        }
        return copier.failed ? 1 : 0
    }

    /// Whether the copy may run on the main thread (`MainThreadExecutor`):
    /// one regular file of at most `IO.smallFileLimit` bytes onto nothing or
    /// a regular file, whose calls all return soon (a FIFO's open may wait
    /// without end, and `-i` waits for an answer: the main thread must then
    /// stay free to take a signal).
    static func copiesOnMainThread(_ operands: [Copier.Operand], _ settings: Settings) -> Bool {
        guard operands.count == 1, let operand = operands.first, !settings.interactive, settings.link == .none,
              !settings.attributesOnly,
              let source = try? FileStatus.of(operand.source, followingSymlinks: operand.follow),
              source.kind == .regular, source.size <= Int64(IO.smallFileLimit) else { return false }
        do throws(Errno) {
            let there = try FileStatus.ifPresent(operand.destination, followingSymlinks: true)
            return there == nil || there?.kind == .regular
        } catch {
            return false
        }
    }

    /// A message and exit 1, without the usage hint.
    private func failPlain(_ message: String) -> Never {
        writeLine(STDERR_FILENO, "\(programName): \(message)")
        Glibc.exit(1)
    }

    private func fail(_ message: String) -> Never {
        var text = "\(programName): \(message)\nTry '\(programName) --help' for more information.\n"
        text.withUTF8 { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
        Glibc.exit(1)
    }
}
