import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles

/// Programmer errors documented in the API stop the process with a message;
/// these run in a child process (exit tests).
@Suite("Programmer errors")
struct ProgrammerErrorTests {
    @Test("sync onto the serial queue you are running on stops with a precondition failure")
    func syncOntoOwnQueue() async {
        await #expect(processExitsWith: .failure) {
            let queue = IOQueue(label: "self-sync")
            queue.sync { queue.sync {} }
        }
    }

    @Test("a concurrent queue cannot be an actor's serial executor")
    func concurrentAsSerialExecutor() async {
        await #expect(processExitsWith: .failure) {
            _ = IOQueue(label: "concurrent", kind: .concurrent).asUnownedSerialExecutor()
        }
    }

    @Test("resume without suspend stops with a precondition failure")
    func overResume() async {
        await #expect(processExitsWith: .failure) {
            IOQueue(label: "over-resume").resume()
        }
    }

    @Test("leave without enter stops with a precondition failure")
    func overLeave() async {
        await #expect(processExitsWith: .failure) {
            IOGroup().leave()
        }
    }
}
