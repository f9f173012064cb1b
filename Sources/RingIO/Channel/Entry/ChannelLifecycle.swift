import SystemPackage
import RingIOBase

/// A channel's life, as a value: where its operations go (its fd's entry,
/// a path not yet opened, or an error), what waits for a path to open, the
/// close and the stop, and the one hand-off of the cleanup handler. Each
/// event returns what the shell (`ChannelCore`) must do once it has
/// released its lock: enqueue on the entry, open the path, end operations
/// without I/O, stop them, hand the cleanup handler on.
///
/// ```
///   path channel:  unchecked ──read on the caller's thread──▶ openingUnchecked ──pathOpened──▶ open(entry)
///                     │ other first use, the sweep: beginCheck         │ not cached, not regular: checkInstead
///                     ▼                                                ▼
///   path channel:  checking ──pathChecked──▶ checked ──first use──▶ opening ──pathOpened──▶ open(entry)
///                     │  └──first use: waits (deferred)                 │            ▲          │ release
///                     │                                                 │   pathOpened│          ▼ (idle, not pinned)
///                     │                                  reopening ◀──next use── released(position)
///                     └──────────pathFailed─────────────┬───────┴───────┘
///                                                       ▼
///   fd channel:    open(entry) or failed(error)      failed(error)
///
///   close:  not closed ──close──▶ closed ──close(stop: true)──▶ stopped
/// ```
///
/// A path channel whose entry has nothing queued, running or left to
/// return may let go of its fd (`release`) and open the path again on its
/// next use; `pin` (the user saw the fd) forbids it for good. A read
/// about to run on the caller's thread may open the file there
/// (`beginOpenNow`): the same `opening` or `reopening` state, ended the
/// same way. A path channel whose first open may be made so starts
/// `unchecked`: that open is its check; any other first use, the shell's
/// sweep of channels left unused, or an open there that cannot answer
/// checks it as before.
///
/// The cleanup handler is handed on exactly once: to the entry when an
/// open channel closes (it runs once every channel of the fd closed), at
/// once with the error when the channel fails, at once with `nil` when a
/// path channel closes with nothing open and nothing waiting.
///
/// Generic over the entry and the operation so that it can be driven
/// without a kernel (`ChannelLifecycleTests`).
struct ChannelLifecycle<Entry: AnyObject, Operation: AnyObject> {
    /// Where the channel's operations go.
    enum Target {
        /// A path channel that has not opened its file.
        case unopened(Opening)
        /// Operations go to this entry; a random channel's offsets count from `base`.
        case open(Entry, base: Int64)
        /// Creation, the check or the open failed: every operation gets this error.
        case failed(Errno)
    }

    /// How far a path channel is in opening its file.
    enum Opening: Equatable {
        /// Not checked yet; nothing waits: a read on the caller's thread
        /// opens it (`beginOpenNow`), anything else checks it first.
        case unchecked
        /// Being opened on the caller's thread before any check; work
        /// waits in `deferred`. If that open cannot answer, the path is
        /// checked instead (`checkInstead`).
        case openingUnchecked
        /// The path is being checked (`statx`); work waits in `deferred`.
        case checking
        /// Checked; nothing waits: the first operation or barrier opens it.
        case checked
        /// The file is being opened; work waits in `deferred`.
        case opening
        /// It was open and let go of its fd while idle; nothing waits: the
        /// next operation or barrier opens it again. `position`: a stream
        /// channel's file position then, restored on reopening.
        case released(position: Int64?)
        /// The file is being opened again (`released` before); work waits
        /// in `deferred`.
        case reopening(position: Int64?)

        /// An open is under way (`opening`, `reopening`).
        var isOpening: Bool {
            switch self {
            case .opening, .openingUnchecked, .reopening: return true
            case .unchecked, .checking, .checked, .released: return false
            }
        }
    }

    /// How far the channel is closed.
    enum Closing: Equatable {
        case notClosed
        /// `close()`: new operations end at once with `ECANCELED`.
        case closed
        /// `close(stop: true)` too: the active operations were stopped.
        case stopped
    }

    /// Work that waits for a path to open.
    enum Deferred {
        case operation(Operation)
        case barrier(@Sendable () -> Void)
    }

    /// What `submit` leaves to do.
    enum SubmitAction {
        /// The operation's one handler call, with this error (`nil`: an
        /// empty range, done); it is not active.
        case finishWithoutIO(Errno?)
        /// Make it active and queue it on `entry`.
        case enqueue(Entry, base: Int64)
        /// Make it active; it waits for the path to open. `openNow`: start
        /// opening the file.
        case deferred(openNow: Bool)
    }

    /// What `barrier` leaves to do.
    enum BarrierAction {
        case enqueue(Entry)
        /// It waits for the path to open. `openNow`: start opening the file.
        case deferred(openNow: Bool)
        /// Nothing will run after it: run it on the channel's queue now.
        case runNow
    }

    /// What `cancel` (task cancellation of one operation) leaves to do.
    enum CancelAction: Equatable {
        /// It waited for the path to open and no longer does: end it with
        /// `ECANCELED`, no I/O. `cleanupNow`: it was the last work of a
        /// closed channel whose file is not being opened (and will not
        /// be): run the cleanup handler with `nil` now.
        case finishWithoutIO(cleanupNow: Bool)
        /// It reached the entry (or already ended): stop it.
        case stop
    }

    /// What `close` leaves to do, in this order.
    struct CloseActions {
        /// Operations that waited for the path to open: end each with
        /// `ECANCELED`, no I/O.
        var cancel: [Operation] = []
        /// Stop every active operation.
        var stopActive = false
        /// Tell this entry the channel closed, handing it the cleanup handler.
        var closeEntry: Entry?
        /// Run the cleanup handler with `nil` on the channel's queue.
        var cleanupNow = false
    }

    /// What `pathOpened` leaves to do.
    struct OpenedActions {
        /// What waited, in order: queue it on the entry.
        var pending: [Deferred]
        /// The channel closed while it opened: tell the entry, handing it
        /// the cleanup handler.
        var handOffCleanup: Bool
    }

    /// What `pathFailed` leaves to do.
    struct FailedActions {
        /// What waited, in order: operations end with the error, barriers run.
        var pending: [Deferred]
        /// Run the cleanup handler with the error on the channel's queue.
        var runCleanup: Bool
    }

    private(set) var target: Target
    private(set) var closing = Closing.notClosed
    /// The cleanup handler ran, or was handed to the entry: never twice.
    private(set) var cleanupHandedOff = false
    /// Work waiting for the path to open (`checking`, `opening`,
    /// `reopening`), in order.
    private(set) var deferred: [Deferred] = []
    /// The user saw the fd (`pin`): the channel never lets go of it.
    private(set) var pinned = false

    /// A channel that starts at `target`: `.open` for an fd channel,
    /// `.unopened(.checking)` for a path channel (`.unchecked` when a
    /// reader's thread may make its first open), `.failed` for one whose
    /// creation failed (the shell then runs the cleanup handler with the
    /// error: it is handed off).
    init(_ target: Target) {
        self.target = target
        if case .failed = target { cleanupHandedOff = true }
        _invariantCheck()
    }

    var isClosed: Bool { closing != .notClosed }

    /// The open channel's entry (`nil` once closed).
    var currentEntry: Entry? {
        guard !isClosed, case .open(let entry, _) = target else { return nil }
        return entry
    }

    /// The open being made is a reopen: the stream position to restore
    /// (`.some(nil)`: a random channel's, none); `nil` when it is not.
    var reopening: Int64?? {
        if case .unopened(.reopening(let position)) = target { return .some(position) }
        return nil
    }

    /// No open of the path is under way or waited for: open, failed, or
    /// unopened with nothing waiting.
    var opensNoMore: Bool {
        guard case .unopened(let opening) = target else { return true }
        return !opening.isOpening && deferred.isEmpty
    }

    /// The error every operation gets, once the channel failed.
    var failure: Errno? {
        if case .failed(let error) = target { return error }
        return nil
    }

    // MARK: - events

    /// A new operation of `length` bytes.
    mutating func submit(_ operation: Operation, length: Int) -> SubmitAction {
        defer { _invariantCheck() }
        if isClosed { return .finishWithoutIO(.canceled) }
        switch target {
        case .failed(let error):
            return .finishWithoutIO(error)
        case _ where length == 0:
            return .finishWithoutIO(nil)
        case .open(let entry, let base):
            return .enqueue(entry, base: base)
        case .unopened:
            deferred.append(.operation(operation))
            // (The shell saw `isUnchecked` before: it checks the path now.)
            if target.isUnchecked { target = .unopened(.checking) }
            return .deferred(openNow: startOpenIfNeeded())
        }
    }

    /// A barrier.
    mutating func barrier(_ work: @escaping @Sendable () -> Void) -> BarrierAction {
        defer { _invariantCheck() }
        switch target {
        case .open(let entry, _):
            return .enqueue(entry)
        case .unopened where !isClosed:
            deferred.append(.barrier(work))
            if target.isUnchecked { target = .unopened(.checking) }
            return .deferred(openNow: startOpenIfNeeded())
        case .unopened, .failed:
            return .runNow
        }
    }

    /// Task cancellation of `operation`.
    mutating func cancel(_ operation: Operation) -> CancelAction {
        defer { _invariantCheck() }
        guard let index = deferred.firstIndex(where: {
            if case .operation(let op) = $0 { return op === operation }
            return false
        }) else { return .stop }
        deferred.remove(at: index)
        return .finishWithoutIO(cleanupNow: cleanupIfIdleAndClosed())
    }

    /// `close(stop:)`.
    mutating func close(stop: Bool) -> CloseActions {
        defer { _invariantCheck() }
        var actions = CloseActions()
        if stop && closing != .stopped {
            actions.stopActive = true
            for case .operation(let op) in deferred { actions.cancel.append(op) }
            deferred.removeAll { if case .operation = $0 { return true } else { return false } }
        }
        if !isClosed {
            switch target {
            case .open(let entry, _):
                if !cleanupHandedOff {
                    cleanupHandedOff = true
                    actions.closeEntry = entry
                }
            case .unopened, .failed:
                break
            }
        }
        if stop { closing = .stopped } else if closing == .notClosed { closing = .closed }
        actions.cleanupNow = cleanupIfIdleAndClosed()
        return actions
    }

    /// The user asks for the fd: the open channel's entry, which the
    /// channel then never lets go of; `nil` (and nothing pinned) when no
    /// file is open.
    mutating func pin() -> Entry? {
        defer { _invariantCheck() }
        guard let entry = currentEntry else { return nil }
        pinned = true
        return entry
    }

    /// The shell found the open channel's entry idle (nothing queued,
    /// running or left to return): the channel lets go of it, keeping the
    /// stream `position`. Returns the entry for the shell to close; `nil`
    /// when the channel may not (not open, closed, pinned).
    mutating func release(position: Int64?) -> Entry? {
        defer { _invariantCheck() }
        guard !pinned, let entry = currentEntry else { return nil }
        target = .unopened(.released(position: position))
        return entry
    }

    /// An operation about to run on the caller's thread opens the path
    /// there: checked (or released), nothing waiting, not closed. The open
    /// is then under way (`opening`, `reopening`) as if work waited for it:
    /// what arrives meanwhile waits in `deferred`, and `pathOpened` or
    /// `pathFailed` ends it. Returns whether it began.
    mutating func beginOpenNow() -> Bool {
        defer { _invariantCheck() }
        guard !isClosed, deferred.isEmpty else { return false }
        switch target {
        case .unopened(.unchecked): target = .unopened(.openingUnchecked)
        case .unopened(.checked): target = .unopened(.opening)
        case .unopened(.released(let position)): target = .unopened(.reopening(position: position))
        default: return false
        }
        return true
    }

    /// An unchecked path is to be checked now (the shell's sweep found it
    /// unused): returns whether the shell must check it. (`submit` and
    /// `barrier` do this themselves.)
    mutating func beginCheck() -> Bool {
        defer { _invariantCheck() }
        guard !isClosed, target.isUnchecked else { return false }
        target = .unopened(.checking)
        return true
    }

    /// The open on the caller's thread of an unchecked path could not
    /// answer (not all cached, not a regular file, an error): the path is
    /// checked instead, which gives the answer; what waits keeps waiting.
    /// Returns whether the shell must check it; when the channel closed
    /// meanwhile with nothing waiting it need not, and `cleanupNow` says
    /// the cleanup handler runs now (with `nil`), once.
    mutating func checkInstead() -> (check: Bool, cleanupNow: Bool) {
        defer { _invariantCheck() }
        guard case .unopened(.openingUnchecked) = target else { illegal("checkInstead") }
        target = .unopened(.checking)
        if cleanupIfIdleAndClosed() { return (false, true) }
        return (!(isClosed && deferred.isEmpty), false)
    }

    /// The path's check passed: returns whether the shell must open it now.
    mutating func pathChecked() -> Bool {
        defer { _invariantCheck() }
        guard case .unopened(.checking) = target else { illegal("pathChecked") }
        target = .unopened(.checked)
        return startOpenIfNeeded()
    }

    /// The file opened on `entry`.
    mutating func pathOpened(_ entry: Entry) -> OpenedActions {
        defer { _invariantCheck() }
        guard case .unopened(let opening) = target, opening.isOpening else { illegal("pathOpened") }
        target = .open(entry, base: 0)
        let pending = deferred
        deferred = []
        let handOff = isClosed && !cleanupHandedOff
        if handOff { cleanupHandedOff = true }
        return OpenedActions(pending: pending, handOffCleanup: handOff)
    }

    /// The check or the open failed with `error`.
    mutating func pathFailed(_ error: Errno) -> FailedActions {
        defer { _invariantCheck() }
        guard case .unopened(let opening) = target, opening == .checking || opening.isOpening else {
            illegal("pathFailed(\(error))")
        }
        target = .failed(error)
        let pending = deferred
        deferred = []
        let runCleanup = !cleanupHandedOff
        cleanupHandedOff = true
        return FailedActions(pending: pending, runCleanup: runCleanup)
    }

    /// A closed path channel with nothing open, opening or waiting: the
    /// cleanup handler runs now (with `nil`), once. Returns whether it must.
    private mutating func cleanupIfIdleAndClosed() -> Bool {
        guard isClosed, !cleanupHandedOff, case .unopened(let opening) = target,
              !opening.isOpening, deferred.isEmpty else { return false }
        cleanupHandedOff = true
        return true
    }

    /// Whether the shell must start opening the file now: checked (or
    /// released), not yet opening, and something waits.
    private mutating func startOpenIfNeeded() -> Bool {
        guard !deferred.isEmpty else { return false }
        switch target {
        case .unopened(.checked): target = .unopened(.opening)
        case .unopened(.released(let position)): target = .unopened(.reopening(position: position))
        default: return false
        }
        return true
    }

    /// An event that cannot happen in this state: a bug in the shell, never
    /// bad input.
    private func illegal(_ event: String) -> Never {
        fatalError("ChannelLifecycle: \(event) in \(target), \(closing)")
    }

    // MARK: - invariants

    /// Checks what must hold between events; called after each one. Debug
    /// builds only: a release build compiles it to nothing.
    @inline(__always)
    func _invariantCheck() {
        #if DEBUG
        switch target {
        case .unopened(.unchecked), .unopened(.checked), .unopened(.released):
            precondition(deferred.isEmpty, "an unchecked, checked or released path with work waiting is not opening")
        case .unopened:
            break
        case .open, .failed:
            precondition(deferred.isEmpty, "work waits, but the path is no longer opening")
        }
        if case .failed = target { precondition(cleanupHandedOff, "a failed channel kept its cleanup handler") }
        if isClosed, case .open = target { precondition(cleanupHandedOff, "a closed open channel kept its cleanup handler") }
        if isClosed, case .unopened(let opening) = target, !opening.isOpening, deferred.isEmpty {
            precondition(cleanupHandedOff, "a closed channel with nothing open or waiting kept its cleanup handler")
        }
        if pinned, case .unopened(.released) = target { preconditionFailure("a pinned channel let go of its fd") }
        if closing == .stopped {
            for case .operation in deferred { preconditionFailure("an operation waits in a stopped channel") }
        }
        #endif
    }
}

extension ChannelLifecycle.Target {
    /// A path channel not checked yet.
    var isUnchecked: Bool {
        if case .unopened(.unchecked) = self { return true }
        return false
    }

    /// A path channel being opened on a reader's thread before any check.
    var isOpeningUnchecked: Bool {
        if case .unopened(.openingUnchecked) = self { return true }
        return false
    }
}
