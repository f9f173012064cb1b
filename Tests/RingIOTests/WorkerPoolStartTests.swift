#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import RingIOTestSupport
@testable import RingIOQueue

/// When the worker pool starts its threads, in a child process (a fresh
/// pool): a program that never has a job waiting starts no watchdog; once
/// every worker is blocked, the watchdog starts and adds one.
@Suite("Worker pool start-up")
struct WorkerPoolStartTests {
    @Test("the watchdog starts only once a job has to wait, and still unblocks a stalled pool")
    func lazyWatchdog() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            ChildChecks.run { checks in
                checks.check(threads(named: "ringio-watchdog") == 0, "a watchdog before any job")
                // Jobs one at a time, each finding an idle worker.
                for _ in 0..<20 {
                    let ran = Latch()
                    IOQueue.global.async { ran.signal() }
                    checks.check(ran.wait(timeout: .seconds(10)), "a job did not run")
                    usleep(20_000)  // the worker is idle again
                }
                checks.check(threads(named: "ringio-watchdog") == 0,
                             "a watchdog started although every job found an idle worker; threads: \(threadNames())")
                checks.check(threads(named: "ringio-worker") >= 1, "no worker")
                // Every base worker blocked: the next job waits, the watchdog
                // starts and adds a worker for it.
                let blockers = IOQueue(label: "blockers", kind: .concurrent)
                let release = Latch()
                for _ in 0..<(WorkerPool.shared.baseThreads + 2) {
                    blockers.async { _ = release.wait(timeout: .seconds(30)) }
                }
                let ran = Latch()
                IOQueue(label: "other").async { ran.signal() }
                checks.check(ran.wait(timeout: .seconds(5)), "work did not run while every base worker was blocked")
                var watchdogs = threads(named: "ringio-watchdog")
                for _ in 0..<200 where watchdogs != 1 {  // a new thread names itself when it first runs
                    usleep(10_000)
                    watchdogs = threads(named: "ringio-watchdog")
                }
                checks.check(watchdogs == 1, "\(watchdogs) watchdogs once the pool stalled; threads: \(threadNames())")
                release.signal()
            }
        }
        ChildChecks.report(result)
    }
}

/// The names of this process's threads.
private func threadNames() -> [String] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.map { task in
        ((try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? "?")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// The threads of this process whose name is `name`.
private func threads(named name: String) -> Int {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.filter { task in
        let comm = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
        return comm.trimmingCharacters(in: .whitespacesAndNewlines) == name
    }.count
}
