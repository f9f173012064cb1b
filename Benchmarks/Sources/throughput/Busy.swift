// `--busy N`: threads that spin on the CPU beside every measurement, to see
// how each system holds up on a loaded machine. They are this process's
// threads, so fio and the copy children (started by this process, in its
// session) meet the same competition as the in-process rows.
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

final class BusyThreads: Sendable {
    private let stop = Atomic<Bool>(false)
    private let threads: Mutex<[pthread_t]> = Mutex([])
    /// Loop iterations, summed over the threads (to show they ran).
    let spins = Atomic<UInt64>(0)

    /// Starts `count` spinning threads.
    init(count: Int) {
        for _ in 0..<count {
            let context = Unmanaged.passRetained(self).toOpaque()
            var thread = pthread_t()
            let rc = pthread_create(&thread, nil, { raw in
                let busy = Unmanaged<BusyThreads>.fromOpaque(raw!).takeRetainedValue()
                busy.spin()
                return nil
            }, context)
            precondition(rc == 0, "throughput: --busy: pthread_create failed (\(rc))")
            threads.withLock { $0.append(thread) }
        }
    }

    private func spin() {
        var n: UInt64 = 0
        while !stop.load(ordering: .relaxed) {
            n &+= 1
            if n & 0xFFFF == 0 { spins.add(0x10000, ordering: .relaxed) }
        }
    }

    /// Stops the threads and waits for them.
    func finish() {
        stop.store(true, ordering: .relaxed)
        for thread in threads.withLock({ $0 }) { pthread_join(thread, nil) }
    }
}
