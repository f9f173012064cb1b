#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import SystemPackage
import RingIO

/// The one-line progress bar: bytes, percent, rate and ETA, redrawn at most
/// ten times a second on a terminal (in place, with `\r`), or once a second
/// as plain lines when the output is not a terminal.
///
/// `add` only counts (it may run on the engine's thread, in the kernel-copy
/// path); `tick` draws when a drawing is due. Ticks come from the channels'
/// handlers in the channel path (every chunk, and the read channel's strict
/// interval, which calls even while nothing moves), and from a 10 Hz timer
/// source while a kernel copy runs.
final class Progress: Sendable {
    private struct State {
        var total: Int64
        var done: Int64 = 0
        var files = 0
        var lastDraw: UInt64 = 0
        var drawn = false
    }

    private let state: Mutex<State>
    private let start: UInt64
    private let onTerminal: Bool
    private let fd: Int32

    init(totalBytes: Int64, fd: Int32 = STDOUT_FILENO) {
        start = Progress.now()
        // The first drawing comes one period in: a quick copy draws no bar.
        state = Mutex(State(total: totalBytes, lastDraw: start))
        self.fd = fd
        onTerminal = isatty(fd) == 1
    }

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    var bytesDone: Int64 { state.withLock { $0.done } }
    var elapsedSeconds: Double { Double(Progress.now() - start) / 1e9 }

    func add(_ bytes: Int) {
        state.withLock { $0.done += Int64(bytes) }
    }

    /// Ticks every 100 ms, from a timer source (a timeout in the engine's
    /// ring: no task, no thread), until the caller cancels the source.
    func startTicker() -> IOTimerSource {
        let timer = IOTimerSource(queue: .global)
        timer.schedule(deadline: .now + .milliseconds(100), repeating: .milliseconds(100), leeway: .milliseconds(10))
        timer.setEventHandler { [self] in tick() }
        timer.activate()
        return timer
    }

    func fileDone() {
        state.withLock { $0.files += 1 }
        tick()
    }

    /// Redraws if the last drawing is old enough.
    func tick() {
        let now = Progress.now()
        let period: UInt64 = onTerminal ? 100_000_000 : 1_000_000_000
        let line = state.withLock { s -> String? in
            guard now &- s.lastDraw >= period else { return nil }
            s.lastDraw = now
            s.drawn = true
            return render(s, now: now)
        }
        if let line { emit(onTerminal ? "\r" + line + "\u{1B}[K" : line + "\n") }
    }

    /// The final line: always in a log; on a terminal, if a bar was drawn.
    func finish() {
        let line = state.withLock { s -> String? in
            guard s.drawn || !onTerminal else { return nil }
            return render(s, now: Progress.now())
        }
        if let line { emit(onTerminal ? "\r" + line + "\u{1B}[K\n" : line + "\n") }
    }

    private func render(_ s: State, now: UInt64) -> String {
        let seconds = max(Double(now - start) / 1e9, 1e-9)
        let rate = Double(s.done) / seconds
        let fraction = s.total > 0 ? min(Double(s.done) / Double(s.total), 1) : 1
        let width = 24
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        var eta = "--:--"
        if rate > 0 && s.total > s.done {
            eta = formatDuration(Double(s.total - s.done) / rate)
        } else if s.done >= s.total {
            eta = seconds < 60 ? fixed(seconds, 2) + " s" : formatDuration(seconds)
        }
        let percent = String(Int(fraction * 100))
        return "[\(bar)] \(pad(percent, 3))% \(formatBytes(s.done)) / \(formatBytes(s.total))"
            + "  \(formatBytes(Int64(rate)))/s  \(s.done >= s.total ? "in" : "ETA") \(eta)"
    }

    private func emit(_ text: String) { writeAll(fd, text) }
}

func pad(_ s: String, _ width: Int) -> String {
    s.count >= width ? s : String(repeating: " ", count: width - s.count) + s
}

/// 1.5 GiB, 320 MiB, 12 KiB, 17 B.
func formatBytes(_ bytes: Int64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    if unit == 0 { return "\(bytes) B" }
    return fixed(value, value < 10 ? 2 : value < 100 ? 1 : 0) + " " + units[unit]
}

/// `value` with `digits` decimals, without Foundation.
func fixed(_ value: Double, _ digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let rounded = (value * scale).rounded() / scale
    var text = String(rounded)
    if let dot = text.firstIndex(of: ".") {
        let decimals = text.distance(from: dot, to: text.endIndex) - 1
        if digits == 0 {
            text = String(text[..<dot])
        } else if decimals < digits {
            text += String(repeating: "0", count: digits - decimals)
        } else if decimals > digits {
            text = String(text[...text.index(dot, offsetBy: digits)])
        }
    }
    return text
}

/// 0:07, 3:25, 1:02:03.
func formatDuration(_ seconds: Double) -> String {
    let total = Int(seconds.rounded(.up))
    let h = total / 3600, m = (total / 60) % 60, s = total % 60
    let ss = s < 10 ? "0\(s)" : "\(s)"
    if h > 0 { return "\(h):\(m < 10 ? "0\(m)" : "\(m)"):\(ss)" }
    return "\(m):\(ss)"
}

// The sizes, for the progress bar.
extension Copier {
    /// The bytes the copy will move: regular files, followed as the copy follows them.
    static func totalBytes(of sources: [FilePath], recursive: Bool) -> Int64 {
        var total: Int64 = 0
        func walk(_ path: FilePath, topLevel: Bool) {
            guard let status = try? FileStatus.of(path, followingSymlinks: topLevel && !recursive) else { return }
            switch status.kind {
            case .regular:
                total += status.size
            case .directory where recursive:
                for name in (try? FS.entries(of: path)) ?? [] { walk(joined(path, name), topLevel: false) }
            default:
                break
            }
        }
        for source in sources { walk(source, topLevel: true) }
        return total
    }
}
