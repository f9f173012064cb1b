#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ArgumentParser
import RingIO
import Synchronization
import SystemPackage

@main
struct RingCP: ParsableCommand {
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

    /// The values ArgumentParser parsed, as plain options.
    var options: Options {
        Options(recursive: recursive, archive: archive, noDereferenceKeepLinks: noDereferenceKeepLinks,
                noDereference: noDereference, dereference: dereference,
                dereferenceCommandLine: dereferenceCommandLine, preserve: preserve, preserveLists: preserveLists,
                noPreserveLists: noPreserveLists, hardLink: hardLink, symbolicLink: symbolicLink,
                backupShort: backupShort, backupControl: backupControl, suffix: suffix, updateShort: updateShort,
                update: update, removeDestination: removeDestination, attributesOnly: attributesOnly,
                copyContents: copyContents, parents: parents, interactive: interactive,
                keepDirectorySymlink: keepDirectorySymlink, reflink: reflink, sparse: sparse, debug: debug,
                noClobber: noClobber, force: force, verbose: verbose, noTargetDirectory: noTargetDirectory,
                targetDirectory: targetDirectory, progress: progress, verify: verify, inPlace: inPlace,
                direct: direct, jobs: jobs, method: method, paths: paths)
    }

    mutating func validate() throws {
        if let reason = options.invalidReason { throw ValidationError(reason) }
    }

    /// cp's options that take an optional value (`--preserve`, `--backup`,
    /// `--reflink`, `--update`) given without one get their default, which
    /// the parser cannot do itself.
    static func main() {
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
        Glibc.exit(parse(arguments).execute())
    }

    /// The options `arguments` (already expanded by `main`) ask for: by the
    /// fast parser where it can, else by ArgumentParser, which also prints
    /// help, the version and every error (and exits).
    static func parse(_ arguments: [String]) -> Options {
        switch Options.parseFast(arguments) {
        case .version?:
            print(configuration.version)
            Glibc.exit(0)
        case .run(let options)?:
            return options
        case nil:
            break
        }
        do {
            var command = try parseAsRoot(arguments)
            guard let ringcp = command as? RingCP else {
                // The parser's own commands (help): they print and exit.
                try command.run()
                Glibc.exit(0)
            }
            return ringcp.options
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
}
