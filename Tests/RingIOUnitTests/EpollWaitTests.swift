import Foundation
import Testing
@testable import RingIOBase

/// The pool's readiness poller keeps the timers' alarms while it waits: its
/// wait must end at the alarm's nanosecond (not rounded up to the next
/// millisecond, as `epoll_wait` does) and never before it.
@Suite("epoll waits in nanoseconds")
struct EpollWaitTests {
    @Test func timedWaitIsNeverEarlyAndUsesNanoseconds() throws {
        let epfd = try Syscall.epollCreate()
        defer { Syscall.closeIgnoringErrors(epfd) }
        var data = [UInt64](repeating: 0, count: 4)
        var events = [UInt32](repeating: 0, count: 4)
        for timeout: Int64 in [1, 150_000, 1_300_000] {
            let start = monotonicNanoseconds()
            let n = try data.withUnsafeMutableBufferPointer { d in
                try events.withUnsafeMutableBufferPointer { e in
                    try Syscall.epollWait(epfd, data: d, events: e, timeoutNanoseconds: timeout)
                }
            }
            let elapsed = monotonicNanoseconds() - start
            #expect(n == 0)
            #expect(elapsed >= UInt64(timeout), "woke \(elapsed) ns into a \(timeout) ns wait")
        }
        // Linux 5.11 has epoll_pwait2; this kernel must not have fallen
        // back to whole milliseconds.
        let kernel = ProcessInfo.processInfo.operatingSystemVersion
        if (kernel.majorVersion, kernel.minorVersion) >= (5, 11) {
            #expect(Syscall.epollWaitTakesNanoseconds)
        } else {
            print("EpollWaitTests: kernel \(kernel.majorVersion).\(kernel.minorVersion) has no epoll_pwait2 (5.11); the millisecond fallback was checked")
        }
    }

    @Test func readyEntryReturnsAtOnce() throws {
        let epfd = try Syscall.epollCreate()
        defer { Syscall.closeIgnoringErrors(epfd) }
        let ev = try Syscall.eventfd(flags: 0)
        defer { Syscall.closeIgnoringErrors(ev) }
        try Syscall.epollControl(epfd, .add, ev, events: Syscall.epollIn, data: 7)
        try Syscall.eventfdWrite(ev, 1)
        var data = [UInt64](repeating: 0, count: 4)
        var events = [UInt32](repeating: 0, count: 4)
        let n = try data.withUnsafeMutableBufferPointer { d in
            try events.withUnsafeMutableBufferPointer { e in
                try Syscall.epollWait(epfd, data: d, events: e, timeoutNanoseconds: 60_000_000_000)
            }
        }
        #expect(n == 1)
        #expect(data[0] == 7)
        #expect(events[0] & Syscall.epollIn != 0)
    }
}
