#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import Synchronization

/// Runs a task's jobs on the main thread, between the signals it waits for.
///
/// `ringcp SRC DST` of one small regular file has nothing to do in parallel:
/// its task runs here (`Task(executorPreference:)`), on the thread that
/// waits in `Interrupts.wait`, and the library makes the copy's system calls
/// on it too (`BlockingCalls.allowed`), as cp does: no worker thread
/// started, no hand-off either way. A job enqueued from another thread (a
/// completion resuming the task) wakes the main thread through the signal
/// pipe, one byte (`Interrupts.runJobs`) whatever the number of jobs.
///
/// Only for copies whose calls cannot wait without end (regular files on
/// both sides): while a job runs, a signal waits for it in the pipe.
final class MainThreadExecutor: TaskExecutor {
    /// Jobs not yet run, and whether the main thread is running them (it
    /// then takes new ones without being woken). Running from the start:
    /// the main thread calls `runJobs` once it has made the task, so the
    /// task's first job needs no wake-up.
    private let state = Mutex<(jobs: [UnownedJob], running: Bool)>(([], true))
    private let wake: @Sendable () -> Void

    init(wake: @escaping @Sendable () -> Void) {
        self.wake = wake
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        let first = state.withLock { s -> Bool in
            s.jobs.append(unowned)
            return s.jobs.count == 1 && !s.running
        }
        if first { wake() }
    }

    /// Main thread: runs the jobs enqueued so far, and those they enqueue, until none is left.
    func runJobs() {
        while true {
            let jobs = state.withLock { s -> [UnownedJob] in
                let taken = s.jobs
                s.jobs.removeAll()
                s.running = !taken.isEmpty
                return taken
            }
            if jobs.isEmpty { return }
            BlockingCalls.allowed {
                for job in jobs { job.runSynchronously(on: asUnownedTaskExecutor()) }
            }
        }
    }
}
