// The queue rows (`throughput queues [--busy N] [--rounds N]`): asyncAfter,
// concurrentPerform, semaphores, a hop through a targeted queue and
// priorities under a flood, RingIO's queues beside Dispatch's in one run.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import Dispatch
import RingIO
import Synchronization

enum QueueBench {
    /// A pointer the iterations write through, each index once.
    struct Slots<T>: @unchecked Sendable {
        // @unchecked: every index is written by one iteration only, read after all end.
        let base: UnsafeMutablePointer<T>
    }

    static func nowNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    /// Process CPU time (user + system) in nanoseconds.
    static func cpuNanoseconds() -> UInt64 {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        func ns(_ t: timeval) -> UInt64 { UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_usec) * 1_000 }
        return ns(usage.ru_utime) + ns(usage.ru_stime)
    }

    static func startThread(_ body: @escaping @Sendable () -> Void) {
        final class Box: Sendable {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, Unmanaged.passRetained(Box(body)).toOpaque())
        precondition(rc == 0)
        pthread_detach(thread)
    }

    static func percentile(_ xs: [Double], _ p: Double) -> Double {
        let sorted = xs.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p))]
    }

    static func spin(nanoseconds: UInt64) {
        let end = nowNanoseconds() + nanoseconds
        while nowNanoseconds() < end {}
    }

    // MARK: - asyncAfter

    struct AfterResult { let p50: Double, p99: Double, cpu: Double, seconds: Double }

    /// 100,000 one-shots at seeded random delays up to 100 ms.
    static func after(ringio: Bool, count: Int = 100_000) -> AfterResult {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let delays = (0..<count).map { _ -> UInt64 in
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            return state % 100_000_000
        }
        let lateness = UnsafeMutablePointer<Int64>.allocate(capacity: count)
        defer { lateness.deallocate() }
        let slots = Slots(base: lateness)
        let left = Atomic<Int>(count)
        let done = DispatchSemaphore(value: 0)
        let cpu0 = cpuNanoseconds(), t0 = nowNanoseconds()
        var armedAt = t0
        defer {
            if getenv("QUEUES_AFTER_DETAIL") != nil {
                print("\(ringio ? "RingIO" : "Dispatch") armed 100,000 in \((armedAt - t0) / 1_000_000) ms")
            }
        }
        if ringio {
            let clock = ContinuousClock()
            let queue = IOQueue.global
            for i in 0..<count {
                // Each delay counts from its own call (arming 100,000 takes a while).
                let deadline = clock.now + .nanoseconds(Int64(delays[i]))
                queue.asyncAfter(deadline: deadline) {
                    let late = clock.now - deadline
                    slots.base[i] = late.components.seconds * 1_000_000_000 + late.components.attoseconds / 1_000_000_000
                    if left.subtract(1, ordering: .relaxed).newValue == 0 { done.signal() }
                }
            }
        } else {
            let queue = DispatchQueue.global()
            for i in 0..<count {
                let start = nowNanoseconds()
                let intended = start + delays[i]
                queue.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: intended)) {
                    slots.base[i] = Int64(bitPattern: nowNanoseconds() &- intended)
                    if left.subtract(1, ordering: .relaxed).newValue == 0 { done.signal() }
                }
            }
        }
        armedAt = nowNanoseconds()
        done.wait()
        let seconds = Double(nowNanoseconds() - t0) / 1e9
        let cpu = Double(cpuNanoseconds() - cpu0) / 1e6
        let late = (0..<count).map { Double(lateness[$0]) / 1_000 }
        if getenv("QUEUES_AFTER_DETAIL") != nil {
            // Lateness by deadline decile: a backlog grows along the run, a
            // per-item delay does not.
            var byDecile = [[Double]](repeating: [], count: 10)
            for i in 0..<count { byDecile[Int(delays[i] / 10_000_000)].append(late[i]) }
            print("\(ringio ? "RingIO" : "Dispatch") lateness p50 by deadline decile (µs):",
                  byDecile.map { Int(percentile($0, 0.5)) }, "run \(Int(seconds * 1000)) ms")
        }
        return AfterResult(p50: percentile(late, 0.5), p99: percentile(late, 0.99), cpu: cpu, seconds: seconds)
    }

    // MARK: - concurrentPerform

    static func apply(ringio: Bool, iterations: Int, heavy: Bool) -> Double {
        let out = UnsafeMutablePointer<UInt64>.allocate(capacity: iterations)
        defer { out.deallocate() }
        let slots = Slots(base: out)
        let body: @Sendable (Int) -> Void
        if heavy {
            body = { i in
                var x = UInt64(i) | 1
                for _ in 0..<2_000_000 { x ^= x << 13; x ^= x >> 7; x ^= x << 17 }
                slots.base[i] = x
            }
        } else {
            body = { i in slots.base[i] = UInt64(i) &* 2_654_435_761 }
        }
        let t0 = nowNanoseconds()
        if ringio {
            IOQueue.concurrentPerform(iterations: iterations, body)
        } else {
            DispatchQueue.concurrentPerform(iterations: iterations, execute: body)
        }
        return Double(nowNanoseconds() - t0) / 1e6
    }

    // MARK: - semaphores

    static func pingPongThreads(ringio: Bool, rounds: Int = 100_000) -> Double {
        let done = DispatchSemaphore(value: 0)
        let t0 = nowNanoseconds()
        if ringio {
            let a = IOSemaphore(value: 0), b = IOSemaphore(value: 0)
            startThread { for _ in 0..<rounds { a.wait(); b.signal() }; done.signal() }
            for _ in 0..<rounds { a.signal(); b.wait() }
        } else {
            let a = DispatchSemaphore(value: 0), b = DispatchSemaphore(value: 0)
            startThread { for _ in 0..<rounds { a.wait(); b.signal() }; done.signal() }
            for _ in 0..<rounds { a.signal(); b.wait() }
        }
        done.wait()
        return Double(nowNanoseconds() - t0) / Double(rounds)
    }

    static func pingPongTasks(ringio: Bool, rounds: Int = 20_000) -> Double {
        let done = DispatchSemaphore(value: 0)
        let t0 = nowNanoseconds()
        if ringio {
            let a = IOSemaphore(value: 0), b = IOSemaphore(value: 0)
            Task {
                for _ in 0..<rounds { try? await a.wait(); b.signal() }
                done.signal()
            }
            Task {
                for _ in 0..<rounds { a.signal(); try? await b.wait() }
                done.signal()
            }
        } else {
            // Dispatch's semaphore blocks the task's (cooperative) thread.
            let a = DispatchSemaphore(value: 0), b = DispatchSemaphore(value: 0)
            Task {
                for _ in 0..<rounds { a.wait(); b.signal() }
                done.signal()
            }
            Task {
                for _ in 0..<rounds { a.signal(); b.wait() }
                done.signal()
            }
        }
        done.wait()
        done.wait()
        return Double(nowNanoseconds() - t0) / Double(rounds)
    }

    // MARK: - hops

    /// `count` chained items (each submits the next) on a queue; ns per hop.
    static func chainedHops(ringio: Bool, targeted: Bool, count: Int = 100_000) -> Double {
        let done = DispatchSemaphore(value: 0)
        let t0 = nowNanoseconds()
        if ringio {
            let queue = targeted ? IOQueue(label: "hop", target: IOQueue(label: "target")) : IOQueue(label: "hop")
            @Sendable func hop(_ n: Int) {
                if n == 0 { _ = done.signal(); return }
                queue.async { hop(n - 1) }
            }
            hop(count)
        } else {
            let queue = targeted ? DispatchQueue(label: "hop", target: DispatchQueue(label: "target"))
                                 : DispatchQueue(label: "hop")
            @Sendable func hop(_ n: Int) {
                if n == 0 { _ = done.signal(); return }
                queue.async { hop(n - 1) }
            }
            hop(count)
        }
        done.wait()
        return Double(nowNanoseconds() - t0) / Double(count)
    }

    /// `count` items submitted at once from this thread; ns per item.
    static func burstHops(ringio: Bool, targeted: Bool, count: Int = 100_000) -> Double {
        let left = Atomic<Int>(count)
        let done = DispatchSemaphore(value: 0)
        let t0 = nowNanoseconds()
        if ringio {
            let queue = targeted ? IOQueue(label: "hop", target: IOQueue(label: "target")) : IOQueue(label: "hop")
            for _ in 0..<count {
                queue.async { if left.subtract(1, ordering: .relaxed).newValue == 0 { done.signal() } }
            }
        } else {
            let queue = targeted ? DispatchQueue(label: "hop", target: DispatchQueue(label: "target"))
                                 : DispatchQueue(label: "hop")
            for _ in 0..<count {
                queue.async { if left.subtract(1, ordering: .relaxed).newValue == 0 { done.signal() } }
            }
        }
        done.wait()
        return Double(nowNanoseconds() - t0) / Double(count)
    }

    // MARK: - priority inversion

    /// The p50 and p99 of a .userInitiated job's latency (submission to
    /// end; the job is 5 ms of CPU), 40 jobs 2 ms apart, with or without a
    /// .background flood of 1 ms CPU-bound jobs keeping every worker busy.
    static func priorityLatency(ringio: Bool, flood: Bool) -> (Double, Double) {
        let stop = Atomic<Bool>(false)
        let inFlight = Atomic<Int>(0)
        let workers = 4 * Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        if flood {
            if ringio {
                let low = IOQueue.global(priority: .background)
                @Sendable func job() {
                    spin(nanoseconds: 1_000_000)
                    if stop.load(ordering: .relaxed) { inFlight.subtract(1, ordering: .relaxed) } else { low.async(job) }
                }
                for _ in 0..<workers { inFlight.add(1, ordering: .relaxed); low.async(job) }
            } else {
                let low = DispatchQueue.global(qos: .background)
                @Sendable func job() {
                    spin(nanoseconds: 1_000_000)
                    if stop.load(ordering: .relaxed) { inFlight.subtract(1, ordering: .relaxed) } else { low.async(execute: job) }
                }
                for _ in 0..<workers { inFlight.add(1, ordering: .relaxed); low.async(execute: job) }
            }
            usleep(50_000)
        }
        let jobs = 40
        let latency = UnsafeMutablePointer<UInt64>.allocate(capacity: jobs)
        defer { latency.deallocate() }
        let slots = Slots(base: latency)
        let left = Atomic<Int>(jobs)
        let done = DispatchSemaphore(value: 0)
        for i in 0..<jobs {
            let submitted = nowNanoseconds()
            let body: @Sendable () -> Void = {
                spin(nanoseconds: 5_000_000)
                slots.base[i] = nowNanoseconds() - submitted
                if left.subtract(1, ordering: .relaxed).newValue == 0 { done.signal() }
            }
            if ringio { IOQueue.global(priority: .userInitiated).async(body) } else { DispatchQueue.global(qos: .userInitiated).async(execute: body) }
            usleep(2_000)
        }
        done.wait()
        stop.store(true, ordering: .relaxed)
        while inFlight.load(ordering: .relaxed) > 0 { usleep(1_000) }
        let ms = (0..<jobs).map { Double(latency[$0]) / 1e6 }
        return (percentile(ms, 0.5), percentile(ms, 0.99))
    }

    // MARK: - the report

    static func main(_ arguments: [String]) -> Never {
        var busyCount = 0, rounds = 3
        var rest = arguments.makeIterator()
        while let a = rest.next() {
            if a == "--busy", let v = rest.next(), let n = Int(v) { busyCount = n }
            if a == "--rounds", let v = rest.next(), let n = Int(v) { rounds = max(1, n) }
        }
        // A program that uses RingIO has its shared engine: on io_uring it
        // installs the ring's timer service, which `asyncAfter` then uses
        // (QUEUES_AFTER_FALLBACK=1 leaves the engine alone: the fallback
        // timer thread).
        if getenv("QUEUES_AFTER_FALLBACK") == nil { print("engine: \(IOEngine.shared.backend)") }
        let busy = busyCount > 0 ? BusyThreads(count: busyCount) : nil
        print("## Queues (\(busyCount == 0 ? "quiet" : "beside \(busyCount) busy threads"); median of \(rounds) rounds; \(Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) cores)\n")
        print("| row | RingIO | Dispatch | RingIO ÷ Dispatch (speed; >1 RingIO faster) |")
        print("|---|---|---|---|")
        let only = getenv("QUEUES_ONLY").map { String(cString: $0) }
        func row(_ name: String, _ unit: String, lowerIsBetter: Bool = true, _ f: (Bool) -> Double) {
            if let only, !name.contains(only) { return }
            var r: [Double] = [], d: [Double] = []
            for round in 0..<rounds {
                // Alternate which goes first.
                if round % 2 == 0 { r.append(f(true)); d.append(f(false)) } else { d.append(f(false)); r.append(f(true)) }
            }
            let rm = median(r), dm = median(d)
            let ratio = lowerIsBetter ? dm / rm : rm / dm
            print("| \(name) | \(fmt(rm)) \(unit) | \(fmt(dm)) \(unit) | \(fmt(ratio))× |")
        }
        func fmt(_ x: Double) -> String {
            x >= 100 ? String(Int(x.rounded())) : (x >= 10 ? String(format1(x)) : format2(x))
        }
        func format1(_ x: Double) -> String { let v = (x * 10).rounded() / 10; return "\(v)" }
        func format2(_ x: Double) -> String { let v = (x * 100).rounded() / 100; return "\(v)" }

        var afters: [Bool: [AfterResult]] = [true: [], false: []]
        for round in 0..<rounds where only == nil || only == "asyncAfter" {
            for ringio in (round % 2 == 0 ? [true, false] : [false, true]) { afters[ringio]!.append(after(ringio: ringio)) }
        }
        for (name, key) in [("asyncAfter ×100,000 (0–100 ms): lateness p50", 0), ("asyncAfter: lateness p99", 1),
                            ("asyncAfter: process CPU", 2)] {
            func pick(_ a: AfterResult) -> Double { key == 0 ? a.p50 : key == 1 ? a.p99 : a.cpu }
            guard !afters[true]!.isEmpty else { break }
            let rm = median(afters[true]!.map(pick)), dm = median(afters[false]!.map(pick))
            print("| \(name) | \(fmt(rm)) \(key == 2 ? "ms" : "µs") | \(fmt(dm)) \(key == 2 ? "ms" : "µs") | \(fmt(dm / rm))× |")
        }
        row("concurrentPerform 1,000,000 tiny", "ms") { apply(ringio: $0, iterations: 1_000_000, heavy: false) }
        row("concurrentPerform 64 heavy (~2M xorshift steps each)", "ms") { apply(ringio: $0, iterations: 64, heavy: true) }
        row("semaphore ping-pong, two threads (per round trip)", "ns") { pingPongThreads(ringio: $0) }
        row("semaphore ping-pong, two tasks (per round trip)", "ns") { pingPongTasks(ringio: $0) }
        row("hop, serial queue targeting a serial queue, chained (per hop)", "ns") { chainedHops(ringio: $0, targeted: true) }
        row("hop, serial queue targeting a serial queue, burst of 100,000 (per item)", "ns") { burstHops(ringio: $0, targeted: true) }
        row("hop, untargeted serial queue, chained (per hop)", "ns") { chainedHops(ringio: $0, targeted: false) }
        row("hop, untargeted serial queue, burst of 100,000 (per item)", "ns") { burstHops(ringio: $0, targeted: false) }
        for ringio in [true, false] where only == nil || only == "priority" {
            var quiet: [Double] = [], flooded: [Double] = [], quiet99: [Double] = [], flooded99: [Double] = []
            for _ in 0..<rounds {
                let q = priorityLatency(ringio: ringio, flood: false), f = priorityLatency(ringio: ringio, flood: true)
                quiet.append(q.0); quiet99.append(q.1); flooded.append(f.0); flooded99.append(f.1)
            }
            print("| \(ringio ? "RingIO" : "Dispatch"): .userInitiated 5 ms job, latency p50/p99 quiet → under a .background flood | \(fmt(median(quiet)))/\(fmt(median(quiet99))) ms → \(fmt(median(flooded)))/\(fmt(median(flooded99))) ms | | flood ÷ quiet p50: \(fmt(median(flooded) / median(quiet)))× |")
        }
        busy?.finish()
        exit(0)
    }
}
