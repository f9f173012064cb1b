#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization
import SystemPackage
import RingIO
import BenchSupport

extension SourceBench {
    /// Round trips per second of one byte bounced between two read sources
    /// over two pipes, and the process's context switches per round trip
    /// (voluntary and not, every thread's: `getrusage`).
    static func pingPong(ringio: Bool, seconds: Double) -> (rate: Double, switches: Double) {
        var ab: [Int32] = [0, 0], ba: [Int32] = [0, 0]
        pipe(&ab)
        pipe(&ba)
        defer { for fd in ab + ba { close(fd) } }
        let (abR, abW, baR, baW) = (ab[0], ab[1], ba[0], ba[1])
        let rounds = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)
        let stopped = DispatchSemaphore(value: 0)
        let aHandler: @Sendable () -> Void = {
            var b: UInt8 = 0
            _ = read(baR, &b, 1)
            rounds.add(1, ordering: .relaxed)
            if stop.load(ordering: .relaxed) { stopped.signal(); return }
            _ = write(abW, &b, 1)
        }
        let bHandler: @Sendable () -> Void = {
            var b: UInt8 = 0
            _ = read(abR, &b, 1)
            _ = write(baW, &b, 1)
        }
        var cancel: [() -> Void] = []
        if ringio {
            let qa = IOQueue(label: "pp.a"), qb = IOQueue(label: "pp.b")
            let a = IOReadSource(fileDescriptor: FileDescriptor(rawValue: baR), queue: qa)
            let b = IOReadSource(fileDescriptor: FileDescriptor(rawValue: abR), queue: qb)
            a.setEventHandler(aHandler)
            b.setEventHandler(bHandler)
            a.activate()
            b.activate()
            cancel = [{ a.cancel() }, { b.cancel() }]
        } else {
            let a = DispatchSource.makeReadSource(fileDescriptor: baR, queue: DispatchQueue(label: "pp.da"))
            let b = DispatchSource.makeReadSource(fileDescriptor: abR, queue: DispatchQueue(label: "pp.db"))
            a.setEventHandler(handler: aHandler)
            b.setEventHandler(handler: bHandler)
            a.activate()
            b.activate()
            cancel = [{ a.cancel() }, { b.cancel() }]
        }
        usleep(50_000)
        var one: UInt8 = 1
        let switchesBefore = contextSwitches()
        let start = ContinuousClock.now
        _ = write(abW, &one, 1)
        usleep(UInt32(seconds * 1e6))
        stop.store(true, ordering: .relaxed)
        _ = stopped.wait(timeout: .now() + 5)
        let elapsed = micros(ContinuousClock.now - start) / 1e6
        let n = rounds.load(ordering: .relaxed)
        let switches = contextSwitches() - switchesBefore
        for c in cancel { c() }
        usleep(50_000)
        return (Double(n) / elapsed, Double(switches) / Double(max(n, 1)))
    }

    /// The process's context switches so far (every thread's, voluntary or not).
    static func contextSwitches() -> Int {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return usage.ru_nvcsw + usage.ru_nivcsw
    }

    /// Write → file-system source handler, one write at a time.
    static func fileSystemLatency(count: Int) -> Percentiles {
        let path = "/tmp/ringio-bench-fs-\(getpid())"
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        defer { close(fd); unlink(path) }
        let wrote = Mutex(ContinuousClock.now)
        let samples = Mutex<[Double]>([])
        let seen = DispatchSemaphore(value: 0)
        let source = IOFileSystemSource(fileDescriptor: FileDescriptor(rawValue: fd), events: [.write],
                                        queue: IOQueue(label: "bench.fs"))
        source.setEventHandler {
            let late = micros(ContinuousClock.now - wrote.withLock { $0 })
            samples.withLock { $0.append(late) }
            seen.signal()
        }
        source.activate()
        usleep(20_000)
        var byte: UInt8 = 1
        for i in 0..<count {
            wrote.withLock { $0 = ContinuousClock.now }
            _ = pwrite(fd, &byte, 1, off_t(i % 4096))
            _ = seen.wait(timeout: .now() + 1)
            usleep(500)
        }
        source.cancel()
        return Percentiles(samples.withLock { $0 })
    }

    /// Append → the chunk from `chunks(follow:)`.
    static func followLatency(count: Int) -> Percentiles {
        let path = "/tmp/ringio-bench-follow-\(getpid())"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o644)
        defer { close(fd); unlink(path) }
        let wrote = Mutex(ContinuousClock.now)
        let samples = Mutex<[Double]>([])
        let seen = DispatchSemaphore(value: 0)
        let task = Task {
            guard let channel = try? IOChannel(kind: .random, path: FilePath(path), mode: .readOnly,
                                               queue: IOQueue(label: "bench.follow")) else { return }
            do {
                for try await _ in channel.chunks(follow: true, pollInterval: .seconds(5)) {
                    let late = micros(ContinuousClock.now - wrote.withLock { $0 })
                    samples.withLock { $0.append(late) }
                    seen.signal()
                }
            } catch {}
        }
        usleep(100_000)
        var byte: UInt8 = 0x41
        for _ in 0..<count {
            wrote.withLock { $0 = ContinuousClock.now }
            _ = write(fd, &byte, 1)
            _ = seen.wait(timeout: .now() + 6)
            usleep(1000)
        }
        task.cancel()
        return Percentiles(samples.withLock { $0 })
    }

    /// kill → handler: 0 RingIO, 1 Dispatch, 2 a plain signalfd loop.
    static func signalLatency(kind: Int, count: Int) -> Percentiles {
        let sent = Mutex(ContinuousClock.now)
        let samples = Mutex<[Double]>([])
        let seen = DispatchSemaphore(value: 0)
        let record: @Sendable () -> Void = {
            samples.withLock { $0.append(micros(ContinuousClock.now - sent.withLock { $0 })) }
            seen.signal()
        }
        var cancel: () -> Void = {}
        switch kind {
        case 0:
            let s = IOSignalSource(signal: SIGUSR1, queue: IOQueue(label: "bench.sig"))
            s.setEventHandler(record)
            s.activate()
            cancel = { s.cancel() }
        case 1:
            signal(SIGUSR1, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: DispatchQueue(label: "bench.dsig"))
            s.setEventHandler(handler: record)
            s.activate()
            cancel = { s.cancel() }
        default:
            var mask = sigset_t()
            sigemptyset(&mask)
            sigaddset(&mask, SIGUSR1)
            let stop = Atomic<Bool>(false)
            // The plain peer: a thread in sigwait (the signal is blocked in
            // every thread of this process; signalfd is not in Glibc's
            // Swift module, which this package imports).
            let thread = Thread { [mask] in
                var mask = mask
                var sig: Int32 = 0
                while !stop.load(ordering: .relaxed) {
                    if sigwait(&mask, &sig) == 0 && !stop.load(ordering: .relaxed) { record() }
                }
            }
            cancel = {
                stop.store(true, ordering: .relaxed)
                kill(getpid(), SIGUSR1)
                thread.join()
            }
        }
        usleep(50_000)
        for _ in 0..<count {
            sent.withLock { $0 = ContinuousClock.now }
            kill(getpid(), SIGUSR1)
            _ = seen.wait(timeout: .now() + 1)
            usleep(300)
        }
        cancel()
        usleep(50_000)
        signal(SIGUSR1, SIG_DFL)
        return Percentiles(samples.withLock { $0 })
    }

    /// SIGKILL of a child → handler: RingIO's process source, or a plain
    /// thread blocked in waitid (Swift cannot call the variadic syscall(2)
    /// that pidfd_open needs here without a C shim).
    static func processLatency(ringio: Bool, count: Int) -> Percentiles {
        var samples: [Double] = []
        for _ in 0..<count {
            var pid: pid_t = 0
            var argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("30"), nil]
            posix_spawn(&pid, "/bin/sleep", nil, nil, &argv, environ)
            for p in argv { free(p) }
            let child = pid
            let seen = DispatchSemaphore(value: 0)
            let at = Mutex(ContinuousClock.now)
            let late = Mutex(0.0)
            if ringio {
                let s = IOProcessSource(processID: pid, queue: IOQueue(label: "bench.proc"))
                s.setEventHandler {
                    late.withLock { $0 = micros(ContinuousClock.now - at.withLock { $0 }) }
                    seen.signal()
                }
                s.activate()
                usleep(5_000)
                at.withLock { $0 = ContinuousClock.now }
                kill(pid, SIGKILL)
                _ = seen.wait(timeout: .now() + 5)
                s.cancel()
            } else {
                // The plain peer: a thread blocked in waitid (WNOWAIT: the
                // child stays for the waitpid below).
                let thread = Thread {
                    var info = siginfo_t()
                    _ = waitid(P_PID, id_t(child), &info, WEXITED | WNOWAIT)
                    late.withLock { $0 = micros(ContinuousClock.now - at.withLock { $0 }) }
                    seen.signal()
                }
                usleep(5_000)
                at.withLock { $0 = ContinuousClock.now }
                kill(pid, SIGKILL)
                _ = seen.wait(timeout: .now() + 5)
                thread.join()
            }
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            samples.append(late.withLock { $0 })
        }
        return Percentiles(samples)
    }
}

/// A joinable thread for the plain loops.
final class Thread: @unchecked Sendable {
    // @unchecked: `thread` is written once, before `join`.
    private var thread = pthread_t()
    init(_ body: @escaping @Sendable () -> Void) {
        final class Box { let body: @Sendable () -> Void; init(_ b: @escaping @Sendable () -> Void) { body = b } }
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        pthread_create(&thread, nil, { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, box)
    }
    func join() { pthread_join(thread, nil) }
}
