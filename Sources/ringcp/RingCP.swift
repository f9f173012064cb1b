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
            Flags mean what they mean to GNU cp. Beyond cp: a file that exists \
            is replaced only once its new contents are complete (they are \
            written to a temporary file beside it, then renamed into place), so \
            a failed or interrupted copy leaves it as it was and no partial file \
            behind; --in-place writes into it directly, as cp does. Holes in \
            sparse files stay holes. Files of 256 KiB or less are copied with \
            their opens, reads, writes, closes and renames batched through the \
            ring, many at once; larger ones are spliced through pipes inside \
            the kernel, four 1 MiB chunks in flight (--method channels: \
            through two random channels instead; --direct: around the page \
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
            """
    )

    @Flag(name: [.customShort("r"), .customShort("R"), .long], help: "Copy directories recursively; symlinks in them are copied as symlinks.")
    var recursive = false

    @Flag(name: [.customShort("p"), .customLong("preserve")], help: "Keep mode, ownership (where permitted) and timestamps.")
    var preserve = false

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

    @Option(help: ArgumentHelp("How large files are copied: 'kernel' (spliced through pipes, the bytes never enter the process; the default) or 'channels' (read and written through two random channels).", valueName: "method"))
    var method = "kernel"

    @Argument(help: "Sources, then the destination.")
    var paths: [String] = []

    mutating func validate() throws {
        if jobs < 1 { throw ValidationError("--jobs must be at least 1") }
        if CopyMethod(rawValue: method) == nil { throw ValidationError("--method must be 'kernel' or 'channels'") }
    }

    func run() async throws {
        var sources = paths
        let target: String
        if let directory = targetDirectory {
            if noTargetDirectory { fail("cannot combine --target-directory (-t) and --no-target-directory (-T)") }
            target = directory
        } else {
            guard paths.count >= 2 else {
                fail(paths.isEmpty ? "missing file operand" : "missing destination file operand after '\(paths[0])'")
            }
            target = sources.removeLast()
        }
        if sources.isEmpty { fail("missing file operand") }

        // What goes where, by cp's rules.
        var pairs: [(FilePath, FilePath)] = []
        let targetIsDirectory = (try? FileStatus.of(FilePath(target), followingSymlinks: true).kind == .directory) ?? false
        if noTargetDirectory {
            if sources.count > 1 { fail("extra operand '\(sources[1])'") }
            pairs = [(FilePath(sources[0]), FilePath(target))]
        } else if targetIsDirectory {
            pairs = sources.map { (FilePath($0), joined(FilePath(target), lastComponentOf: FilePath($0))) }
        } else if targetDirectory != nil || sources.count > 1 {
            fail("target '\(target)' is not a directory")
        } else {
            pairs = [(FilePath(sources[0]), FilePath(target))]
        }
        // "name/" that is not a directory takes only a directory (FilePath drops the slash).
        if !targetIsDirectory && target.hasSuffix("/"),
           let kind = try? FileStatus.of(FilePath(sources[0]), followingSymlinks: !recursive).kind, kind != .directory {
            var text = "ringcp: cannot create regular file '\(target)': Not a directory\n"
            text.withUTF8 { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
            throw ExitCode.failure
        }

        let settings = Settings(method: CopyMethod(rawValue: method) ?? .kernel, direct: direct, recursive: recursive, preserve: preserve, noClobber: noClobber, force: force && !noClobber,
                                verbose: verbose, inPlace: inPlace, verify: verify, jobs: jobs)
        let showProgress = progress ?? (isatty(STDOUT_FILENO) == 1)
        let bar = showProgress ? Progress(totalBytes: Copier.totalBytes(of: pairs.map(\.0), recursive: recursive)) : nil
        let copier = Copier(settings: settings, progress: bar)

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
        let work = Task { await copier.copy(pairs) }
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

    private func fail(_ message: String) -> Never {
        var text = "ringcp: \(message)\nTry 'ringcp --help' for more information.\n"
        text.withUTF8 { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
        Glibc.exit(1)
    }
}

/// SIGINT, SIGTERM and SIGHUP cancel the copy: files being written are
/// removed or left as they were, then ringcp exits with 130.
// @unchecked: `sources` is immutable after init, and a dispatch source may
// be cancelled from any thread.
final class Interrupts: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]

    private init(_ sources: [any DispatchSourceSignal]) { self.sources = sources }

    /// Returns once every handler is in place (libdispatch installs its
    /// sigaction asynchronously; a signal before that would be lost).
    static func start(_ onSignal: @escaping @Sendable (Int32) -> Void) async -> Interrupts {
        let queue = DispatchQueue(label: "ringcp.signals")
        let numbers = [SIGINT, SIGTERM, SIGHUP]
        let registered = IOGroup()
        let sources = numbers.map { number -> any DispatchSourceSignal in
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { onSignal(number) }
            registered.enter()
            source.setRegistrationHandler { registered.leave() }
            return source
        }
        // Ignored from here on, until the sources catch them.
        for number in numbers { signal(number, SIG_IGN) }
        for source in sources { source.resume() }
        await registered.done()
        return Interrupts(sources)
    }

    func stop() {
        for source in sources { source.cancel() }
    }
}

/// Cancels the copy task once a signal came, whether the task exists yet or not.
final class StopSwitch: Sendable {
    private let state = Mutex<(task: Task<Void, Never>?, signal: Int32?)>((nil, nil))

    /// The first signal that came.
    var signal: Int32? { state.withLock { $0.signal } }

    func attach(_ task: Task<Void, Never>) {
        let fired = state.withLock { s -> Bool in
            s.task = task
            return s.signal != nil
        }
        if fired { task.cancel() }
    }

    func fire(_ number: Int32) {
        let task = state.withLock { s -> Task<Void, Never>? in
            if s.signal == nil { s.signal = number }
            return s.task
        }
        task?.cancel()
    }
}

extension IOGroup {
    /// Suspends until every `enter` has had its `leave` (without holding a thread).
    func done() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            notify(queue: .global) { continuation.resume() }
        }
    }
}
