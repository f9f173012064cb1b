#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import Synchronization
import SystemPackage

/// The name ringcp was run by (`cp` through a symlink so named), for its messages.
let programName: String = {
    guard CommandLine.argc > 0, let first = CommandLine.unsafeArgv[0] else { return "ringcp" }
    let name = FilePath(platformString: first).lastComponent?.string ?? ""
    return name.isEmpty ? "ringcp" : name
}()

/// The command line's arguments as the kernel gave them, found by the text
/// the parser made of them (`CommandLine.arguments` repairs a name that is
/// not UTF-8; the file system needs its bytes).
struct RawArguments {
    private var byText: [String: [FilePath]] = [:]

    init() {
        // Where every argument is UTF-8 (nearly always), each text is its
        // bytes: no table (building it was a measurable part of start-up).
        var allUTF8 = true
        for index in 1..<Int(max(CommandLine.argc, 1)) {
            guard let argument = CommandLine.unsafeArgv[index] else { continue }
            if String(validatingCString: argument) == nil {
                allUTF8 = false
                break
            }
        }
        if allUTF8 { return }
        for index in 1..<Int(max(CommandLine.argc, 1)) {
            guard let argument = CommandLine.unsafeArgv[index] else { continue }
            byText[String(cString: argument), default: []].append(FilePath(platformString: argument))
        }
    }

    /// The raw bytes of the next argument that reads as `text` (an operand
    /// the parser gave back), or `text` itself (an option's attached value).
    mutating func path(_ text: String) -> FilePath {
        guard !byText.isEmpty, var candidates = byText[text], !candidates.isEmpty else { return FilePath(text) }
        let first = candidates.removeFirst()
        byText[text] = candidates
        return first
    }
}

/// SIGINT, SIGTERM and SIGHUP cancel the copy: files being written are
/// removed or left as they were, then ringcp exits with 128 + the signal's
/// number.
///
/// A `sigaction` handler writes the signal's number, one byte, into a pipe
/// (the only thing it does: `write` is async-signal-safe); the main thread,
/// which has nothing else to do while the copy's tasks run, waits on that
/// pipe in `wait`, and the copy's end writes a 0 into it. No thread of its
/// own, no Dispatch source, no Dispatch at all: installing the handlers
/// takes nine system calls. The handlers stay once the copy is over, so a
/// signal that comes then changes nothing.
///
/// Not an `IOSignalSource`: the main thread waits on this one pipe for three
/// things (a signal, the main-thread executor's jobs, the copy's end), so a
/// signal source would not remove the loop; it would add a hop through the
/// engine's signalfd and a queue before the loop saw the signal.
final class Interrupts: Sendable {
    static let numbers = [SIGINT, SIGTERM, SIGHUP]
    /// How long a signal waits for a call that cannot be cancelled (a FIFO's
    /// open with no reader) to return before ringcp ends as cp would.
    static let stuckMilliseconds: UInt64 = 250

    private let readEnd: Int32
    private let writeEnd: Int32

    private init(readEnd: Int32, writeEnd: Int32) {
        self.readEnd = readEnd
        self.writeEnd = writeEnd
    }

    /// Installs the handlers; a signal from here on is caught (none is lost:
    /// `sigaction` takes effect at once).
    static func install() -> Interrupts {
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) != 0 {
            // Out of fds before anything was copied: say so and stop, as for any file that cannot be opened.
            writeLine(STDERR_FILENO, "\(programName): cannot create a pipe: \(describe(Errno(rawValue: errno)))")
            exit(1)
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            // Never blocks: the handler must not, nor `finished`.
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        signalPipe.store(fds[1], ordering: .releasing)
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { number in
            let saved = errno
            var byte = UInt8(truncatingIfNeeded: number)
            caughtSignal.store(number, ordering: .releasing)
            _ = write(signalPipe.load(ordering: .acquiring), &byte, 1)
            errno = saved
        }
        action.sa_flags = SA_RESTART
        sigemptyset(&action.sa_mask)
        var unblock = sigset_t()
        sigemptyset(&unblock)
        for number in numbers {
            sigaction(number, &action, nil)
            sigaddset(&unblock, number)
        }
        // A parent may have started ringcp with these blocked (a test
        // runner's spawn does): they would then never reach the handler.
        // Threads started from here on inherit the mask.
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
        return Interrupts(readEnd: fds[0], writeEnd: fds[1])
    }

    /// The last signal caught so far, if any, without waiting (its byte
    /// stays in the pipe for `wait`).
    var caught: Int32? {
        let number = caughtSignal.load(ordering: .acquiring)
        return number == 0 ? nil : number
    }

    /// Says that the copy is over (any thread): `wait` returns.
    func finished() {
        var zero: UInt8 = 0
        _ = write(writeEnd, &zero, 1)
    }

    /// The byte that asks `wait` to run its executor's jobs (no signal has this number).
    static let runJobs: UInt8 = 255

    /// Asks `wait` to run its executor's jobs (any thread).
    func wakeForJobs() {
        var byte = Self.runJobs
        _ = write(writeEnd, &byte, 1)
    }

    /// Waits until `finished`, calling `onSignal` (on this thread) for each
    /// signal that comes meanwhile. A signal that comes while a call that
    /// cannot be cancelled is running, and finds the same call still running
    /// `stuckMilliseconds` later, ends ringcp as cp would, killed by it.
    /// With `executor`, runs its jobs here too, when `wakeForJobs` asks.
    func wait(running executor: MainThreadExecutor? = nil, onSignal: (Int32) -> Void) {
        var pending: [(deadline: UInt64, number: Int32, mark: UInt64)] = []
        while true {
            let now = monotonicMilliseconds()
            for check in pending where check.deadline <= now && Blocking.stuckMark == check.mark {
                signal(check.number, SIG_DFL)
                raise(check.number)
                _exit(128 + check.number)
            }
            pending.removeAll { $0.deadline <= now }
            let timeout = pending.map { Int32($0.deadline - now) }.min() ?? -1
            var watched = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
            if poll(&watched, 1, timeout) <= 0 { continue }  // EINTR, or a deadline
            var bytes = [UInt8](repeating: 0, count: 64)
            let count = read(readEnd, &bytes, bytes.count)
            for byte in bytes.prefix(Swift.max(count, 0)) {
                if byte == 0 { return }
                if byte == Self.runJobs {
                    executor?.runJobs()
                    continue
                }
                onSignal(Int32(byte))
                if let mark = Blocking.stuckMark {
                    pending.append((monotonicMilliseconds() + Self.stuckMilliseconds, Int32(byte), mark))
                }
            }
        }
    }
}

/// The write end of `Interrupts`' pipe, for the signal handler (a C function
/// pointer: it captures nothing).
private let signalPipe = Atomic<Int32>(-1)
/// The last signal the handler caught (0: none yet).
private let caughtSignal = Atomic<Int32>(0)

private func monotonicMilliseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000
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

/// The process's environment.
enum ProcessEnvironment {
    static func value(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        return String(cString: value)
    }
}
