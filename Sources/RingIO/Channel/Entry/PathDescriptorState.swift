/// The counts behind `PathDescriptors`, as a value: how many fds path
/// channels hold, which of them may close by themselves, the opens that
/// wait for one to close, and the limit. Each event returns what the shell
/// must do once its lock is released: ask idle holders to let go of their
/// fds, wake waiting opens. Driven without a kernel by
/// `PathDescriptorStateTests`.
///
/// An fd is counted in `open` from the moment its channel has it until it
/// is closed; while open it is held (`holders`: its channel may let go of
/// it), closing (its channel let go of it or closed: it closes once its
/// last handler returns, with no one's help), or neither (pinned by
/// `fileDescriptor`, or not a regular file). A waiting open may wait only
/// while some fd may close by itself (a holder, a closing fd, or a woken
/// open that may become a holder); once none may, every waiting open is
/// woken to try once more (`wake`).
struct PathDescriptorState: Equatable {
    /// Fds opened by path channels and not closed yet.
    private(set) var open = 0
    /// The path channels with an fd they may let go of.
    private(set) var holders = 0
    /// Fds whose channel let go of them or closed, not closed yet.
    private(set) var closing = 0
    /// Opens that failed with `EMFILE` or `ENFILE` and wait for a close.
    private(set) var waiting = 0
    /// Waiting opens woken that have not said how their retry went
    /// (`opened`, `waitForClose`, `retryFailed`): each may become a holder.
    private(set) var retrying = 0
    /// The most fds path channels should hold (half the soft limit, at least 16).
    private(set) var cap = 512
    /// `cap` was computed from the limit (once, then after each `EMFILE`).
    private(set) var limitRead = false
    /// Opens and waits since the last search for idle holders. A search
    /// visits holders, so it is made when the pressure begins and then once
    /// per `cap / 8` of them; meanwhile a channel that goes idle lets go of
    /// its fd by itself.
    private var eventsSinceSearch = 0

    /// What an event leaves to do.
    struct Actions: Equatable {
        /// Ask this many idle holders, least recently used first, to let go of their fds.
        var release = 0
        /// Wake this many waiting opens, oldest first, each to try once more.
        var wake = 0
    }

    /// More fds are open than `cap`, or opens wait: a channel that goes
    /// idle lets go of its fd at once.
    var pressure: Bool { open > cap || waiting > 0 }

    /// Some fd may still close without the user's help.
    var mayClose: Bool { holders > 0 || closing > 0 || retrying > 0 }

    /// The soft `RLIMIT_NOFILE` read now (`nil`: it could not be read).
    mutating func setLimit(_ limit: Int?) {
        cap = Swift.max(16, (limit ?? 1024) / 2)
        limitRead = true
        _invariantCheck()
    }

    /// A path channel opened an fd. `holds`: it may let go of it (a
    /// regular file's, the channel still open). `retried`: the open was a
    /// woken waiter's. `closes`: the channel closed meanwhile, the fd
    /// closes once its handlers return.
    mutating func opened(holds: Bool, retried: Bool, closes: Bool) -> Actions {
        defer { _invariantCheck() }
        let before = pressure
        open += 1
        if holds { holders += 1 }
        if retried { retrying -= 1 }
        if closes { closing += 1 }
        var actions = Actions(wake: stall())
        if open > cap && searchNow(pressureBefore: before) { actions.release = open - cap * 3 / 4 }
        return actions
    }

    /// A path channel's fd closed (it was closing): one waiting open tries again.
    mutating func closed() -> Actions {
        defer { _invariantCheck() }
        open -= 1
        closing -= 1
        guard waiting > 0 else { return Actions() }
        waiting -= 1
        retrying += 1
        return Actions(wake: 1)
    }

    /// A channel no longer holds its fd (`wasHolder`): it let go of it or
    /// closed (`closes`: the fd closes by itself, soon), or was pinned.
    mutating func forget(wasHolder: Bool, closes: Bool) -> Actions {
        defer { _invariantCheck() }
        if wasHolder { holders -= 1 }
        if closes { closing += 1 }
        return Actions(wake: stall())
    }

    /// An open failed with `EMFILE` or `ENFILE` (`retried`: a woken
    /// waiter's). `nil`: no fd may close by itself, the open fails (and
    /// `failing` says how many others to wake); else it waits, and asks
    /// `release` idle holders to let go (at least one at each wait:
    /// holders that went idle before the pressure began let go only when
    /// asked, and a wait that asks none could wait forever).
    mutating func waitForClose(retried: Bool, failing: inout Actions) -> Actions? {
        defer { _invariantCheck() }
        if retried { retrying -= 1 }
        guard mayClose else {
            failing = Actions(wake: stall())
            return nil
        }
        let before = pressure
        waiting += 1
        return Actions(release: searchNow(pressureBefore: before) ? waiting : 1)
    }

    /// A woken waiter's open failed otherwise than with `EMFILE`/`ENFILE`.
    mutating func retryFailed() -> Actions {
        defer { _invariantCheck() }
        retrying -= 1
        return Actions(wake: stall())
    }

    /// No fd may close by itself: every waiting open is woken to try once
    /// more (each fails if its open fails again and this still holds).
    /// Returns how many.
    private mutating func stall() -> Int {
        guard waiting > 0, !mayClose else { return 0 }
        let woken = waiting
        waiting = 0
        retrying += woken
        return woken
    }

    /// Whether to search for idle holders now (see `eventsSinceSearch`).
    private mutating func searchNow(pressureBefore: Bool) -> Bool {
        eventsSinceSearch += 1
        guard !pressureBefore || eventsSinceSearch >= Swift.max(1, cap / 8) else { return false }
        eventsSinceSearch = 0
        return true
    }

    /// Checks what must hold between events: no count below zero, held and
    /// closing fds among the open ones, and no open waiting for a close
    /// that cannot come by itself. Debug builds only.
    @inline(__always)
    func _invariantCheck() {
        #if DEBUG
        precondition(open >= 0 && holders >= 0 && closing >= 0 && waiting >= 0 && retrying >= 0,
                     "PathDescriptorState: a count below zero: \(self)")
        precondition(holders + closing <= open, "PathDescriptorState: more held or closing than open: \(self)")
        precondition(waiting == 0 || mayClose, "PathDescriptorState: opens wait for a close that cannot come: \(self)")
        precondition(cap >= 16, "PathDescriptorState: cap \(cap)")
        #endif
    }
}
