#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ArgumentParser
import Dispatch
import RingIO
import Synchronization
import SystemPackage

@main
struct RingCP: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ringcp",
        abstract: "Copy files and directories, through io_uring.",
        usage: """
            ringcp [OPTIONS] SOURCE DEST
            ringcp [OPTIONS] SOURCE... DIRECTORY
            ringcp [OPTIONS] -t DIRECTORY SOURCE...
            """,
        discussion: """
            Flags mean what they mean to GNU cp. Beyond cp: a regular file \
            that exists is replaced by a regular file only once its new \
            contents are complete (they are written to a temporary file beside \
            it, then renamed into place), so a failed or interrupted copy \
            leaves it as it was and no partial file behind. That atomic replace \
            never applies when the source or the destination is a FIFO, a \
            device or a socket (the bytes go straight into the destination, \
            once, as with cp: a reader waiting on it sees them as they come), \
            nor with --in-place (which writes into the file, as cp does), \
            --remove-destination, --backup (the old file goes first) or \
            --attributes-only. ("-" is a file name, as for cp.) Holes in \
            sparse files stay holes. Files of 256 KiB or less are copied with \
            their opens, reads, writes, closes and renames batched through the \
            ring, many at once; larger ones are copied inside the kernel by \
            copy_file_range, as cp does, or onto ext4 spliced through one \
            1 MiB pipe into blocks allocated first (--method kernel: spliced through \
            pipes by the ring, four 1 MiB chunks in flight; --method \
            channels: through two random channels; --direct: around the page \
            cache).

            Examples:
              ringcp big.iso /mnt/backup/             copy a file into a directory
              ringcp --progress big.iso copy.iso      with a progress bar
              ringcp -r src/ dst/                     copy a tree
              ringcp -rp --verify photos/ /mnt/usb/   keep modes and times, then compare
              ringcp -n *.conf /etc/app/              never overwrite
              ringcp -- -odd-name.txt copy.txt        a source that starts with '-'

            Exit status: 0 when everything was copied, 1 when anything failed \
            (each failure is one line on stderr), 128 + the signal's number \
            when a signal (SIGINT: 130, SIGTERM: 143) cut a copy short. A \
            signal that comes once every file is in place changes nothing.
            """,
        // `--version`, as cp has: scripts call it to tell which cp they have.
        version: "ringcp (RingIO) 0.1.0-dev"
    )

    @Flag(name: [.customShort("r"), .customShort("R"), .long], help: "Copy directories recursively; symlinks in them are copied as symlinks.")
    var recursive = false

    @Flag(name: [.customShort("a"), .long], help: "Same as -dR --preserve=all.")
    var archive = false

    @Flag(name: .customShort("d"), help: "Same as --no-dereference --preserve=links.")
    var noDereferenceKeepLinks = false

    @Flag(name: [.customShort("P"), .customLong("no-dereference")], help: "Copy symlinks among the sources as symlinks.")
    var noDereference = false

    @Flag(name: [.customShort("L"), .customLong("dereference")], help: "Follow every symlink among the sources.")
    var dereference = false

    @Flag(name: .customShort("H"), help: "Follow the symlinks named on the command line.")
    var dereferenceCommandLine = false

    @Flag(name: .customShort("p"), help: "Same as --preserve=mode,ownership,timestamps (ownership where permitted).")
    var preserve = false

    @Option(name: .customLong("preserve"), help: ArgumentHelp("Keep these attributes: mode (with ACLs), ownership, timestamps, links, xattr, context (ignored), all. --preserve alone: mode,ownership,timestamps.", valueName: "list"))
    var preserveLists: [String] = []

    @Option(name: .customLong("no-preserve"), help: ArgumentHelp("Do not keep these attributes.", valueName: "list"))
    var noPreserveLists: [String] = []

    @Flag(name: [.customShort("l"), .customLong("link")], help: "Hard-link files instead of copying them.")
    var hardLink = false

    @Flag(name: [.customShort("s"), .customLong("symbolic-link")], help: "Make symbolic links instead of copying.")
    var symbolicLink = false

    @Flag(name: .customShort("b"), help: "Like --backup, but takes no argument.")
    var backupShort = false

    @Option(name: .customLong("backup"), help: ArgumentHelp("Make a backup of each existing destination file: none/off, numbered/t, existing/nil, simple/never (--backup alone: $VERSION_CONTROL, else existing).", valueName: "control"))
    var backupControl: String?

    @Option(name: [.customShort("S"), .customLong("suffix")], help: "The backup suffix (default: ~, or $SIMPLE_BACKUP_SUFFIX).")
    var suffix: String?

    @Flag(name: .customShort("u"), help: "Same as --update=older.")
    var updateShort = false

    @Option(name: .customLong("update"), help: ArgumentHelp("Which existing destinations to replace: all, none, none-fail, older (--update alone: all).", valueName: "when"))
    var update: String?

    @Flag(help: "Remove each existing destination file before copying (never an atomic replace).")
    var removeDestination = false

    @Flag(help: "Copy only the attributes, not the data.")
    var attributesOnly = false

    @Flag(help: "With -R, copy the contents of FIFOs and devices instead of making new ones.")
    var copyContents = false

    @Flag(help: "Use the full source name under the directory.")
    var parents = false

    @Flag(name: [.customShort("i"), .long], help: "Ask before overwriting (overrides an earlier -n).")
    var interactive = false

    @Flag(help: "With -R, follow existing symlinks to directories in the destination.")
    var keepDirectorySymlink = false

    @Option(help: ArgumentHelp("Share the source's blocks (FICLONE) where the file system can: auto (the default: else copy), always (else fail), never (--reflink alone: always).", valueName: "when"))
    var reflink = "auto"

    @Option(help: ArgumentHelp("Holes: auto and always keep the source's holes; never writes them as zeros.", valueName: "when"))
    var sparse = "auto"

    @Flag(help: "Say how each file was copied.")
    var debug = false

    @Flag(name: [.customShort("n"), .customLong("no-clobber")], help: "Do not overwrite an existing file.")
    var noClobber = false

    @Flag(name: [.customShort("f"), .long], help: "Replace an existing destination file that cannot be written (ignored with -n).")
    var force = false

    @Flag(name: [.customShort("v"), .long], help: "Print each file as it is copied.")
    var verbose = false

    @Flag(name: [.customShort("T"), .customLong("no-target-directory")], help: "Treat DEST as a normal file, even if it is a directory.")
    var noTargetDirectory = false

    @Option(name: [.customShort("t"), .customLong("target-directory")], help: "Copy every SOURCE into DIRECTORY.")
    var targetDirectory: String?

    @Flag(inversion: .prefixedNo, help: "Draw a progress bar (default: on when stdout is a terminal).")
    var progress: Bool?

    @Flag(help: "After copying, read both files again through the library and compare them.")
    var verify = false

    @Flag(help: "Write into an existing destination file directly, as cp does, instead of replacing it atomically.")
    var inPlace = false

    @Flag(help: "Copy large files with O_DIRECT, around the page cache (through the channels; where a file system refuses O_DIRECT, buffered). For big cold copies that should not push everything else out of the cache.")
    var direct = false

    @Option(help: "Small files copied at once.")
    var jobs = 64

    @Option(help: ArgumentHelp("How large files are copied: 'range' (copy_file_range inside the kernel, as cp; the default), 'kernel' (spliced through pipes by the ring, the bytes never enter the process) or 'channels' (read and written through two random channels).", valueName: "method"))
    var method = "range"

    @Argument(help: "Sources, then the destination.")
    var paths: [String] = []

    mutating func validate() throws {
        if jobs < 1 { throw ValidationError("--jobs must be at least 1") }
        if CopyMethod(rawValue: method) == nil { throw ValidationError("--method must be 'range', 'kernel' or 'channels'") }
        if Reflink(rawValue: reflink) == nil { throw ValidationError("invalid argument '\(reflink)' for '--reflink'") }
        if !["auto", "always", "never"].contains(sparse) { throw ValidationError("invalid argument '\(sparse)' for '--sparse'") }
        if let update, Update(rawValue: update) == nil { throw ValidationError("invalid argument '\(update)' for '--update'") }
        if let backupControl, BackupControl(backupControl) == nil {
            throw ValidationError("invalid argument '\(backupControl)' for 'backup type'")
        }
        for list in preserveLists + noPreserveLists {
            if case .failure(let bad) = Preserve.parse(list) { throw ValidationError("invalid argument '\(bad.word)' for '--preserve'") }
        }
        if hardLink && symbolicLink { throw ValidationError("cannot make both hard and symbolic links") }
        let backup = backupShort || (backupControl.flatMap(BackupControl.init) ?? .none) != .none
        if backup && (noClobber || update == "none" || update == "none-fail") {
            throw ValidationError("--backup is mutually exclusive with -n or --update=none")
        }
        if reflink == "always" && sparse != "auto" {
            throw ValidationError("--reflink can be used only with --sparse=auto")
        }
    }

    /// cp's options that take an optional value (`--preserve`, `--backup`,
    /// `--reflink`, `--update`) given without one get their default, which
    /// the parser cannot do itself.
    static func main() async {
        var arguments: [String] = []
        var operandsOnly = false
        for var argument in CommandLine.arguments.dropFirst() {
            if !operandsOnly {
                argument = expandingAbbreviation(argument)
                if argument.hasPrefix("--preserve=") || argument.hasPrefix("--no-preserve=") {
                    let keep = argument.hasPrefix("--preserve=")
                    preserveOrder.append((String(argument.drop { $0 != "=" }.dropFirst()), keep))
                }
                if argument == "--preserve" { preserveOrder.append(("mode,ownership,timestamps", true)) }
                // -i and -n: the later one wins, as in cp.
                if argument == "--interactive" { interactiveLast = true }
                if argument == "--no-clobber" { interactiveLast = false }
                if argument.hasPrefix("-") && !argument.hasPrefix("--") {
                    for letter in argument.dropFirst() {
                        if letter == "i" { interactiveLast = true }
                        if letter == "n" { interactiveLast = false }
                        if letter == "t" || letter == "S" { break }  // the rest is their value
                    }
                }
                switch argument {
                case "--": operandsOnly = true
                case "--preserve": arguments.append("--preserve=mode,ownership,timestamps"); continue
                case "--backup":
                    let control = ProcessEnvironment.value("VERSION_CONTROL") ?? "existing"
                    arguments.append("--backup=\(control)"); continue
                case "--reflink": arguments.append("--reflink=always"); continue
                case "--update": arguments.append("--update=all"); continue
                default: break
                }
            }
            arguments.append(argument)
        }
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // --help and the like: as the parser has them. A bad command line:
            // one line and exit 1, as cp (the parser would exit 64).
            if exitCode(for: error) == .success || error is ExitCode { exit(withError: error) }
            writeAll(STDERR_FILENO, "\(programName): \(message(for: error))\n"
                + "Try '\(programName) --help' for more information.\n")
            Glibc.exit(1)
        }
    }

    /// `--preserve=` and `--no-preserve=` lists in command-line order (the
    /// parser keeps each option's values, not their interleaving). Written
    /// once by `main` before anything else runs.
    nonisolated(unsafe) static var preserveOrder: [(String, Bool)] = []
    /// Of -i and -n, whether -i came last (nil: neither).
    nonisolated(unsafe) static var interactiveLast: Bool?

    /// cp's long options, for getopt's unambiguous abbreviations (`--b` for `--backup`).
    static let longOptions = [
        "recursive", "archive", "no-dereference", "dereference", "preserve", "no-preserve", "link", "symbolic-link",
        "backup", "suffix", "update", "remove-destination", "attributes-only", "copy-contents", "parents",
        "interactive", "keep-directory-symlink", "reflink", "sparse", "debug", "no-clobber", "force", "verbose",
        "no-target-directory", "target-directory", "progress", "no-progress", "verify", "in-place", "direct", "jobs",
        "method", "help",
    ]

    /// `--pa` → `--parents` (and `--b=x` → `--backup=x`) where one long option starts so.
    static func expandingAbbreviation(_ argument: String) -> String {
        guard argument.hasPrefix("--"), argument.count > 2 else { return argument }
        let body = argument.dropFirst(2)
        let name = String(body.prefix { $0 != "=" })
        let rest = body.dropFirst(name.count)
        if longOptions.contains(name) { return argument }
        let matches = longOptions.filter { $0.hasPrefix(name) }
        return matches.count == 1 ? "--" + matches[0] + rest : argument
    }

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

    func run() async throws {
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

        // Signals are caught before the first byte moves.
        let stop = StopSwitch()
        let signals = await Interrupts.start { number in
            stop.fire(number)
            // A call that waits without end (a FIFO's open with no reader)
            // cannot be cancelled: if it is still the same one a moment
            // later, ringcp ends as cp would, killed by the signal.
            guard let mark = Blocking.stuckMark else { return }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(250)) {
                guard Blocking.stuckMark == mark else { return }
                signal(number, SIG_DFL)
                raise(number)
                _exit(128 + number)
            }
        }
        let operands = zip(pairs, follow).map { Copier.Operand(source: $0.0, destination: $0.1, follow: $1) }
        let work = Task { await copier.copy(operands) }
        stop.attach(work)
        await work.value
        signals.stop()
        bar?.finish()
        if let bar, !copier.interrupted {
            let seconds = bar.elapsedSeconds
            let rate = Double(bar.bytesDone) / max(seconds, 1e-9)
            print("copied \(formatBytes(bar.bytesDone)) in \(fixed(seconds, 2)) s (\(formatBytes(Int64(rate)))/s)")
        }
        if copier.interrupted {
            copier.report("interrupted; nothing half-copied is left behind")
            throw ExitCode(128 + (stop.signal ?? SIGINT))
        }
        if copier.failed { throw ExitCode.failure }
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

