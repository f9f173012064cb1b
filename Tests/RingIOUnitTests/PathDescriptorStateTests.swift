import Testing
@testable import RingIOChannel

@Suite("PathDescriptorState: the fds path channels hold, their release under pressure, and the opens that wait, with no kernel")
struct PathDescriptorStateTests {
    /// A state whose cap is `limit / 2`.
    private func state(limit: Int) -> PathDescriptorState {
        var state = PathDescriptorState()
        state.setLimit(limit)
        return state
    }

    @Test("the cap is half the limit, at least 16, 512 when the limit cannot be read")
    func cap() {
        #expect(state(limit: 1024).cap == 512)
        #expect(state(limit: 10).cap == 16)
        var unknown = PathDescriptorState()
        unknown.setLimit(nil)
        #expect(unknown.cap == 512)
        #expect(unknown.limitRead)
    }

    @Test("past the cap: the first open asks for release down to three quarters of it; later ones only every cap/8 events; a channel going idle lets go meanwhile (pressure)")
    func releaseUnderPressure() {
        var s = state(limit: 64)  // cap 32
        for _ in 0..<32 {
            let r1 = s.opened(holds: true, retried: false, closes: false)
            #expect(r1 == .init())
        }
        #expect(!s.pressure)
        let first = s.opened(holds: true, retried: false, closes: false)
        #expect(first.release == 33 - 24, "down to 3/4 of the cap")
        #expect(s.pressure)
        var asked = 0
        for _ in 0..<3 {
            let actions = s.opened(holds: true, retried: false, closes: false)
            if actions.release > 0 { asked += 1 }
        }
        #expect(asked == 0, "searched again only after cap/8 = 4 events")
        let r2 = s.opened(holds: true, retried: false, closes: false)
        #expect(r2.release == 37 - 24)
        // Holders let go: each one closing, then closed.
        for _ in 0..<14 {
            let r3 = s.forget(wasHolder: true, closes: true)
            #expect(r3 == .init())
            let r4 = s.closed()
            #expect(r4 == .init())
        }
        #expect(s.open == 23 && s.holders == 23 && s.closing == 0)
        #expect(!s.pressure)
    }

    @Test("EMFILE with holders: the open waits and asks one holder; a close wakes the oldest waiter, which may open")
    func waitThenClose() {
        var s = state(limit: 1024)
        _ = s.opened(holds: true, retried: false, closes: false)
        var failing = PathDescriptorState.Actions()
        let wait = s.waitForClose(retried: false, failing: &failing)
        #expect(wait != nil)
        #expect((wait?.release ?? 0) >= 1, "at least one holder is asked")
        #expect(s.waiting == 1 && s.pressure)
        let r5 = s.forget(wasHolder: true, closes: true)
        #expect(r5 == .init(), "closing: something will close")
        let r6 = s.closed()
        #expect(r6 == .init(wake: 1))
        #expect(s.waiting == 0 && s.retrying == 1 && s.open == 0)
        let r7 = s.opened(holds: true, retried: true, closes: false)
        #expect(r7 == .init())
        #expect(s.retrying == 0 && s.holders == 1)
    }

    @Test("EMFILE with nothing that may close by itself: the open fails at once")
    func nothingMayClose() {
        var s = state(limit: 1024)
        _ = s.opened(holds: false, retried: false, closes: false)  // a FIFO, or pinned
        var failing = PathDescriptorState.Actions()
        let r8 = s.waitForClose(retried: false, failing: &failing)
        #expect(r8 == nil)
        #expect(failing == .init())
        #expect(s.waiting == 0)
    }

    @Test("the last holder is pinned while opens wait: every waiter is woken to try once more; a retry that fails again, with nothing else, fails")
    func lastHolderPinned() {
        var s = state(limit: 1024)
        _ = s.opened(holds: true, retried: false, closes: false)
        var failing = PathDescriptorState.Actions()
        let r9 = s.waitForClose(retried: false, failing: &failing)
        #expect(r9 != nil)
        let r10 = s.waitForClose(retried: false, failing: &failing)
        #expect(r10 != nil)
        #expect(s.waiting == 2)
        let r11 = s.forget(wasHolder: true, closes: false)
        #expect(r11 == .init(wake: 2), "pinned: nothing closes by itself")
        #expect(s.waiting == 0 && s.retrying == 2)
        // The first retry fails again: the other may still become a holder, so it waits.
        let r12 = s.waitForClose(retried: true, failing: &failing)
        #expect(r12 != nil)
        #expect(s.waiting == 1 && s.retrying == 1)
        // The other's open fails otherwise: nothing may close now, the waiter tries once more.
        let r13 = s.retryFailed()
        #expect(r13 == .init(wake: 1))
        #expect(s.retrying == 1 && s.waiting == 0)
        // That last try fails with EMFILE again: it fails, nothing left to wake.
        let r14 = s.waitForClose(retried: true, failing: &failing)
        #expect(r14 == nil)
        #expect(failing == .init())
        #expect(s.retrying == 0 && s.waiting == 0 && s.open == 1)
    }

    @Test("an fd opened for a channel closed meanwhile is closing at once, never a holder")
    func openedClosing() {
        var s = state(limit: 1024)
        _ = s.opened(holds: false, retried: false, closes: true)
        #expect(s.open == 1 && s.closing == 1 && s.holders == 0)
        var failing = PathDescriptorState.Actions()
        let r15 = s.waitForClose(retried: false, failing: &failing)
        #expect(r15 != nil, "it will close by itself")
        let r16 = s.closed()
        #expect(r16 == .init(wake: 1))
        #expect(s.open == 0 && s.closing == 0)
    }
}
