// `throughput sources [--busy N] [--seconds S]`: RingIO's dispatch sources
// beside Dispatch's own sources (and plain signalfd / pidfd loops) in the
// same run: timer lateness and drift, CPU per fire of 10,000 timers, fd
// readiness ping-pong, file-system event and chunks(follow:) latency,
// signal and process-exit latency. Results: Benchmarks/results/sources.md.
#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization
import SystemPackage
import RingIO
import BenchSupport

enum SourceBench {
    static func main(_ arguments: [String]) -> Never {
        var busyCount = 0
        var seconds = 2.0
        var only: Set<String>?
        var it = arguments.makeIterator()
        while let a = it.next() {
            switch a {
            case "--busy": busyCount = Int(it.next() ?? "0") ?? 0
            case "--seconds": seconds = Double(it.next() ?? "2") ?? 2
            case "--only": only = Set((it.next() ?? "").split(separator: ",").map(String.init))
            default:
                print("usage: throughput sources [--busy N] [--seconds S] [--only timers,many,pingpong,fs,follow,signal,process]")
                exit(2)
            }
        }
        // Signals: blocked here, before any thread starts, so every thread
        // inherits the mask (the plain signalfd loop needs that).
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGUSR1)
        sigaddset(&set, SIGUSR2)
        pthread_sigmask(SIG_BLOCK, &set, nil)
        _ = IOEngine.shared
        let busy = busyCount > 0 ? BusyThreads(count: busyCount) : nil
        print("# sources: \(busyCount == 0 ? "quiet" : "beside \(busyCount) busy threads"), \(IOEngine.shared.backend)")
        var rows: [String] = []
        func row(_ s: String) { print(s); rows.append(s) }
        row("| measurement | RingIO | peer | peer name |")
        row("|---|---|---|---|")
        func runs(_ name: String) -> Bool { only?.contains(name) ?? true }
        if runs("timers") {
            let oneShotR = timerOneShot(ringio: true, count: Int(seconds * 300))
            let oneShotD = timerOneShot(ringio: false, count: Int(seconds * 300))
            row("| 1 ms one-shot lateness p50 / p99 (µs) | \(oneShotR.text) | \(oneShotD.text) | DispatchSourceTimer |")
            let repR = timerRepeating(ringio: true, seconds: seconds)
            let repD = timerRepeating(ringio: false, seconds: seconds)
            row("| 1 ms repeating lateness p50 / p99 (µs) | \(repR.lateness.text) | \(repD.lateness.text) | DispatchSourceTimer |")
            row("| 1 ms repeating: fires, drift (fires behind the clock), early | \(repR.fires), \(repR.drift), \(repR.early) | \(repD.fires), \(repD.drift), \(repD.early) | DispatchSourceTimer |")
        }
        if runs("many") {
            let manyR = manyTimers(ringio: true, seconds: seconds)
            let manyD = manyTimers(ringio: false, seconds: seconds)
            if busyCount > 0 {
                row("| 10,000 × 10 ms timers: fires in \(seconds) s | \(manyR.fires) | \(manyD.fires) | DispatchSourceTimer (CPU per fire: quiet run only, the busy threads' CPU is the process's) |")
            } else {
                row("| 10,000 × 10 ms timers: CPU µs per fire (fires) | \(f(manyR.cpuPerFire, 2)) (\(manyR.fires)) | \(f(manyD.cpuPerFire, 2)) (\(manyD.fires)) | DispatchSourceTimer; ratio \(f(manyR.cpuPerFire / manyD.cpuPerFire, 2))× |")
        }
        }
        if runs("pingpong") {
            let ppR = pingPong(ringio: true, seconds: seconds)
            let ppD = pingPong(ringio: false, seconds: seconds)
            row("| pipe ping-pong round trips/s (context switches per round trip) | \(Int(ppR.rate)) (\(f(ppR.switches, 2))) | \(Int(ppD.rate)) (\(f(ppD.switches, 2))) | DispatchSource read; ratio \(f(ppR.rate / ppD.rate, 2))× |")
        }
        if runs("fs") {
            let fs = fileSystemLatency(count: Int(seconds * 200))
            row("| file-system event latency write → handler p50 / p99 (µs) | \(fs.text) | – | (Dispatch has no vnode source on Linux) |")
        }
        if runs("follow") {
            let follow = followLatency(count: Int(seconds * 100))
            row("| chunks(follow:) latency append → chunk p50 / p99 (µs) | \(follow.text) | – | (was 100 ms polling) |")
        }
        if runs("signal") {
            let sigR = signalLatency(kind: 0, count: Int(seconds * 200))
            let sigD = signalLatency(kind: 1, count: Int(seconds * 200))
            let sigP = signalLatency(kind: 2, count: Int(seconds * 200))
            row("| signal kill → handler p50 / p99 (µs) | \(sigR.text) | \(sigD.text); \(sigP.text) | DispatchSource signal; plain sigwait thread |")
        }
        if runs("process") {
            let procR = processLatency(ringio: true, count: 40)
            let procP = processLatency(ringio: false, count: 40)
            row("| process exit (SIGKILL) → handler p50 / p99 (µs) | \(procR.text) | \(procP.text) | plain waitid(WNOWAIT) thread |")
        }
        busy?.finish()
        exit(0)
    }

    struct Percentiles {
        var p50: Double, p99: Double
        var text: String { "\(f(p50)) / \(f(p99))" }
        init(_ samples: [Double]) {
            let s = samples.sorted()
            p50 = s.isEmpty ? .nan : s[s.count / 2]
            p99 = s.isEmpty ? .nan : s[min(s.count - 1, s.count * 99 / 100)]
        }
    }

    static func f(_ x: Double, _ digits: Int = 1) -> String {
        guard x.isFinite else { return "–" }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        return String(Double((x * scale).rounded()) / scale)
    }

    static func micros(_ d: Duration) -> Double {
        let c = d.components
        return Double(c.seconds) * 1e6 + Double(c.attoseconds) / 1e12
    }

    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    /// Lateness of 1 ms one-shot timers, re-armed one after another.
    static func timerOneShot(ringio: Bool, count: Int) -> Percentiles {
        let samples = Mutex<[Double]>([])
        let done = DispatchSemaphore(value: 0)
        let deadline = Mutex(ContinuousClock.now)
        if ringio {
            let timer = IOTimerSource(queue: IOQueue(label: "bench.timer"))
            timer.setEventHandler {
                let late = micros(ContinuousClock.now - deadline.withLock { $0 })
                let n = samples.withLock { $0.append(late); return $0.count }
                if n == count { done.signal(); return }
                let next = ContinuousClock.now + .milliseconds(1)
                deadline.withLock { $0 = next }
                timer.schedule(deadline: next)
            }
            let first = ContinuousClock.now + .milliseconds(1)
            deadline.withLock { $0 = first }
            timer.schedule(deadline: first)
            timer.activate()
            done.wait()
            timer.cancel()
        } else {
            let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "bench.dtimer"))
            timer.setEventHandler {
                let late = micros(ContinuousClock.now - deadline.withLock { $0 })
                let n = samples.withLock { $0.append(late); return $0.count }
                if n == count { done.signal(); return }
                deadline.withLock { $0 = ContinuousClock.now + .milliseconds(1) }
                timer.schedule(deadline: .now() + .milliseconds(1), leeway: .nanoseconds(0))
            }
            deadline.withLock { $0 = ContinuousClock.now + .milliseconds(1) }
            timer.schedule(deadline: .now() + .milliseconds(1), leeway: .nanoseconds(0))
            timer.activate()
            done.wait()
            timer.cancel()
        }
        return Percentiles(samples.withLock { $0 })
    }

    /// A 1 ms repeating timer: lateness of each delivery against the due
    /// time of the last fire it carries; drift after all the fires.
    static func timerRepeating(ringio: Bool, seconds: Double) -> (lateness: Percentiles, fires: Int, drift: Int, early: Int) {
        let samples = Mutex<[Double]>([])
        let fired = Atomic<Int>(0)
        let early = Atomic<Int>(0)
        let interval = Duration.milliseconds(1)
        let start = ContinuousClock.now + interval
        let end = Mutex(ContinuousClock.now)
        let handler: @Sendable (UInt) -> Void = { data in
            let now = ContinuousClock.now
            let n = fired.add(Int(data), ordering: .relaxed).newValue
            let due = start + interval * (n - 1)
            if now < due { early.add(1, ordering: .relaxed) }
            samples.withLock { $0.append(micros(now - due)) }
        }
        if ringio {
            let timer = IOTimerSource(queue: IOQueue(label: "bench.rep"))
            timer.setEventHandler { handler(timer.data) }
            timer.schedule(deadline: start, repeating: interval)
            timer.activate()
            usleep(UInt32(seconds * 1e6))
            end.withLock { $0 = ContinuousClock.now }
            timer.cancel()
        } else {
            let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "bench.drep"))
            timer.setEventHandler { handler(timer.data) }
            let offset = start - ContinuousClock.now
            timer.schedule(deadline: .now() + .nanoseconds(Int(offset.components.attoseconds / 1_000_000_000)),
                           repeating: .milliseconds(1), leeway: .nanoseconds(0))
            timer.activate()
            usleep(UInt32(seconds * 1e6))
            end.withLock { $0 = ContinuousClock.now }
            timer.cancel()
        }
        usleep(20_000)
        // Fires due by the cancel, against fires delivered (the handler may
        // still have been catching up: a few fires of lateness, not drift).
        let byClock = Int((end.withLock { $0 } - start) / interval) + 1
        let n = fired.load(ordering: .relaxed)
        return (Percentiles(samples.withLock { $0 }), n, byClock - n, early.load(ordering: .relaxed))
    }

    /// CPU time per fire with 10,000 repeating 10 ms timers.
    static func manyTimers(ringio: Bool, seconds: Double) -> (cpuPerFire: Double, fires: Int) {
        let fires = Atomic<Int>(0)
        let count = 10_000
        var cancel: [() -> Void] = []
        if ringio {
            let queue = IOQueue(label: "bench.many")
            for i in 0..<count {
                let t = IOTimerSource(queue: queue)
                t.setEventHandler { fires.add(Int(t.data), ordering: .relaxed) }
                t.schedule(deadline: .now + .microseconds(i % 10_000), repeating: .milliseconds(10))
                t.activate()
                cancel.append { t.cancel() }
            }
        } else {
            let queue = DispatchQueue(label: "bench.dmany")
            for i in 0..<count {
                let t = DispatchSource.makeTimerSource(queue: queue)
                t.setEventHandler { fires.add(Int(t.data), ordering: .relaxed) }
                t.schedule(deadline: .now() + .microseconds(i % 10_000), repeating: .milliseconds(10),
                           leeway: .nanoseconds(0))
                t.activate()
                cancel.append { t.cancel() }
            }
        }
        // The steady state only: after a warm-up of 200 ms, not the creation.
        usleep(200_000)
        let before = cpuSeconds()
        let firesBefore = fires.load(ordering: .relaxed)
        usleep(UInt32(seconds * 1e6))
        let cpu = cpuSeconds() - before
        let n = fires.load(ordering: .relaxed) - firesBefore
        for c in cancel { c() }
        usleep(50_000)
        return (cpu * 1e6 / Double(max(n, 1)), n)
    }
}
