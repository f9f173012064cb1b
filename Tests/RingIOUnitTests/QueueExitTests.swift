import Testing
import RingIOTestSupport
@testable import RingIOQueue
@testable import RingIOBase

#if canImport(Glibc)
import Glibc
#endif

/// Queue programmer errors and process exits, each in a child process.
@Suite("IOQueue: programmer errors and exits")
struct QueueExitTests {
    @Test("runMain off the main thread stops with a precondition failure")
    func runMainOffMainThread() async {
        await #expect(processExitsWith: .failure) {
            let done = Latch()
            spawnThread(name: "not-main") {
                IOQueue.runMain()
            }
            _ = done.wait(timeout: .seconds(10))
        }
    }

    @Test("100,000 pending asyncAfters do not keep the process from exiting")
    func exitWithPendingAfters() async {
        await #expect(processExitsWith: .success) {
            let queue = IOQueue(label: "pending")
            for i in 0..<100_000 {
                queue.asyncAfter(deadline: .now + .seconds(60) + .microseconds(i)) { abort() }
            }
            exit(0)
        }
    }

    @Test("IOQueue.main: nothing runs before runMain; the serving thread runs the items, in order")
    func mainQueue() async {
        // `runMain` needs the process's main thread, which a test cannot
        // have (the test runner keeps it); its loop is `MainQueueRunner.serve`,
        // run here on a thread of its own for a queue of the same kind.
        await #expect(processExitsWith: .exitCode(7)) {
            let seen = Locked<[Int]>([])
            for i in 0..<3 { IOQueue.main.async { seen.withLock { $0.append(i) } } }
            usleep(20_000)
            guard seen.withLock({ $0.isEmpty }) else { exit(5) }
            let runner = MainQueueRunner()
            let queue = IOQueue(label: "main-like", kind: .serial, priority: .default, target: nil,
                                runner: runner, globalRoot: false)
            let server = Locked<pid_t>(0)
            for i in 0..<3 {
                queue.async {
                    guard Syscall.gettid() == server.withLock({ $0 }) else { exit(3) }
                    seen.withLock { $0.append(i) }
                    if i == 2 { exit(seen.withLock { $0 } == [0, 1, 2] ? 7 : 4) }
                }
            }
            spawnThread(name: "serve") {
                server.withLock { $0 = Syscall.gettid() }
                runner.serve(queue)
            }
            sleep(10)
        }
    }
}
