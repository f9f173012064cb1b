#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
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
        for index in 1..<Int(max(CommandLine.argc, 1)) {
            guard let argument = CommandLine.unsafeArgv[index] else { continue }
            byText[String(cString: argument), default: []].append(FilePath(platformString: argument))
        }
    }

    /// The raw bytes of the next argument that reads as `text` (an operand
    /// the parser gave back), or `text` itself (an option's attached value).
    mutating func path(_ text: String) -> FilePath {
        guard var candidates = byText[text], !candidates.isEmpty else { return FilePath(text) }
        let first = candidates.removeFirst()
        byText[text] = candidates
        return first
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

/// The process's environment.
enum ProcessEnvironment {
    static func value(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        return String(cString: value)
    }
}
