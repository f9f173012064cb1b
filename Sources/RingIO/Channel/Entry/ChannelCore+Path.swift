#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import Synchronization
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

// A path channel's file: the check, the open (and the reopen after the
// channel let go of its fd under fd pressure: PathDescriptors.swift), and
// letting go of it.
extension ChannelCore {
    /// A path channel is used: if it holds an fd, it becomes the most
    /// recently used holder.
    @inline(__always)
    func touch() {
        guard let descriptors = pathDescriptors else { return }
        descriptors.touch(self)
    }

    /// A path channel lets go of its fd if it may (a regular file, open,
    /// not closed, not pinned, not in direct-I/O mode) and its entry has
    /// nothing queued, running or left to return; it opens the path again
    /// on its next use, a stream channel at the position it had. Returns
    /// whether it did. (A FIFO, socket or device never lets go: its other
    /// end would see the close.)
    func releaseIfIdle() -> Bool {
        guard pathSpec != nil else { return false }
        lock.lock()
        guard settings.directIO == .off, !lifecycle.pinned, let entry = lifecycle.currentEntry,
              entry.kind == .regular, kind == .random || (try? Syscall.lseek(entry.fd, 0, SEEK_CUR)) != nil,
              entry.releaseIfIdle() else {
            lock.unlock()
            return false
        }
        // Idle, and no new work can reach the entry: the position is stable
        // (and `lseek` worked on this fd a moment ago).
        let position = kind == .stream ? ((try? Syscall.lseek(entry.fd, 0, SEEK_CUR)) ?? 0) : nil
        _ = lifecycle.release(position: position)
        let stalled = PathDescriptors.shared.forget(self, closing: true)
        lock.unlock()
        PathDescriptors.shared.perform(stalled)
        entry.closeReleased()
        return true
    }

    /// After an operation or inline try of a path channel: under fd
    /// pressure (`PathDescriptors`), an idle channel lets go of its fd now.
    @inline(__always)
    func releaseUnderPressure() {
        guard let descriptors = pathDescriptors, descriptors.pressure.load(ordering: .relaxed) else { return }
        _ = releaseIfIdle()
    }

    /// The check of a path channel's path: on this thread where it cannot
    /// block (`checkPathNow`), else in the background (statx through the
    /// engine; with `.create` and no file, its directory).
    func checkPath() {
        guard let spec = pathSpec else { return }
        if checkPathNow(spec) { return }
        let follow = !spec.options.contains(.noFollow)
        Probe.statx(engine: engine, path: spec.path, follow: follow) { [self] result in
            switch result {
            case .success(let fileKind):
                if let error = fileKind.unusable(for: kind) { return pathFailed(error) }
                pathChecked(regular: fileKind == .regular)
            case .failure(.noSuchFileOrDirectory) where spec.options.contains(.create):
                Probe.statx(engine: engine, path: spec.path.removingLastComponent(), follow: true) { [self] parent in
                    switch parent {
                    case .success(.directory): pathChecked(regular: false)
                    case .success: pathFailed(.notDirectory)
                    case .failure(let error): pathFailed(error)
                    }
                }
            case .failure(let error):
                pathFailed(error)
            }
        }
    }

    /// The check made on this thread from the dentry cache alone: the
    /// path resolved by `openat2(O_PATH, RESOLVE_CACHED)` (which never
    /// waits for a disk or a server, and opens nothing but the name) and
    /// its kind from `fstat`. False, with nothing decided, when that cannot
    /// answer (a name not cached, any error): the background check then
    /// gives the answer and the error, as before.
    private func checkPathNow(_ spec: PathSpec) -> Bool {
        guard CachedOpens.available else { return false }
        let flags = Syscall.pathOnly | O_CLOEXEC | (spec.options.contains(.noFollow) ? O_NOFOLLOW : 0)
        guard let fd = try? CachedOpens.open(spec.path, flags: flags) else { return false }
        let described = describe(fd: fd)
        Syscall.closeIgnoringErrors(fd)
        guard case .success(let (fileKind, _)) = described else { return false }
        if let error = fileKind.unusable(for: kind) {
            pathFailed(error)
        } else {
            pathChecked(regular: fileKind == .regular)
        }
        return true
    }

    private func pathChecked(regular: Bool) {
        let open = lock.withLock { () -> Bool in
            checkedRegular = regular
            return lifecycle.pathChecked()
        }
        if open { openPath() }
    }

    /// Whether a read about to run on this thread may open the path here
    /// (`openPathNow`): a regular file by the check (or one the channel let
    /// go of), first opened without `.create` or `.truncate` (which
    /// `RESOLVE_CACHED` refuses, and which may write), not in direct-I/O
    /// mode. Called with the lock held.
    func mayOpenNowLocked() -> Bool {
        guard let spec = pathSpec, settings.directIO == .off, CachedOpens.available else {
            return false
        }
        switch lifecycle.target {
        case .unopened(.unchecked): return true
        case .unopened(.checked): return checkedRegular && spec.openFlags & (O_CREAT | O_TRUNC) == 0
        case .unopened(.released): return true
        default: return false
        }
    }

    /// Opens the path on this thread (the lifecycle's `beginOpenNow` began
    /// the open): from the dentry cache alone (`openat2` with
    /// `RESOLVE_CACHED`) and with `O_NONBLOCK`, so that it waits for no
    /// disk, server or FIFO peer, then `fstat`; a regular file's fd gets
    /// its flags back (`O_NONBLOCK` off unless asked for) and the channel is
    /// open (or failed, for a reopen that found another file) before this
    /// returns. Anything else (a name not cached, any error, not a regular
    /// file) closes what it opened and opens through the engine, as a
    /// queued operation would, which gives the errors.
    func openPathNow() {
        guard let spec = pathSpec else { return }
        let (reopen, identity, unchecked) = lock.withLock {
            (lifecycle.reopening, openedIdentity, lifecycle.target.isOpeningUnchecked)
        }
        if unchecked { UncheckedPaths.opened(self) }
        let flags = reopen == nil ? spec.openFlags : spec.reopenFlags
        guard let fd = try? CachedOpens.open(spec.path, flags: flags | O_NONBLOCK) else {
            return unchecked ? checkInstead(holding: nil) : openPath()
        }
        let described = describe(fd: fd)
        guard case .success(let (fileKind, found)) = described, fileKind == .regular else {
            if unchecked, case .success(let (fileKind, _)) = described, fileKind != .regular,
               fileKind != .directory {
                // A FIFO or a device: its other end must not see it close
                // before the channel's own open.
                return checkInstead(holding: fd)
            }
            Syscall.closeIgnoringErrors(fd)
            return unchecked ? checkInstead(holding: nil) : openPath()
        }
        // (The fd keeps `O_NONBLOCK` until something other than a read on
        // a caller's thread uses it: `settleFlagsLocked`.)
        openSucceeded(fd: fd, flags: flags, fileKind: fileKind, found: found, reopen: reopen, identity: identity,
                      retried: false, nonblocking: flags & O_NONBLOCK == 0)
    }

    /// A regular file opened on a reader's thread keeps the `O_NONBLOCK` its
    /// open needed (a FIFO's open would wait for a writer) until its fd is
    /// used otherwise than by reads with `RWF_NOWAIT`, which ignore it:
    /// before an operation goes to its entry (the engine honours it on a
    /// file system without `RWF_NOWAIT` support), a barrier, or anyone is
    /// given the fd. Then the flags it was asked for are set, once; a
    /// channel read once and closed never makes that `fcntl`. Called with
    /// the lock held.
    @inline(__always)
    func settleFlagsLocked() {
        guard let flags = unsettledFlags else { return }
        unsettledFlags = nil
        guard let entry = lifecycle.currentEntry else { return }
        _ = try? Syscall.fcntl(entry.fd, F_SETFL, flags)
    }

    /// The open on this thread of an unchecked path could not answer: the
    /// path is checked as it would have been at creation, which gives the
    /// answer or the error; `fd` (not a regular file) is kept until the
    /// channel's own open replaces it.
    private func checkInstead(holding fd: Int32?) {
        let (check, cleanupNow) = lock.withLock { () -> (Bool, Bool) in
            heldDescriptor = fd
            return lifecycle.checkInstead()
        }
        if cleanupNow {
            if let held = lock.withLock({ takeHeldLocked() }) { Syscall.closeIgnoringErrors(held) }
            runCleanup(nil)
        }
        if check { checkPath() }
    }

    /// Takes the held descriptor (the caller closes it once the lock is released).
    func takeHeldLocked() -> Int32? {
        defer { heldDescriptor = nil }
        return heldDescriptor
    }

    /// A path channel whose first open may be made on a reader's thread
    /// (`openPathNow`), which is then its check too: read-only, neither
    /// creating nor truncating, where cached opens work. It starts
    /// unchecked; `UncheckedPaths` checks it if no use comes at once.
    static func mayOpenBeforeCheck(_ spec: PathSpec) -> Bool {
        CachedOpens.available && spec.mode == .readOnly && spec.openFlags & (O_CREAT | O_TRUNC) == 0
    }

    /// The sweep found the channel still unchecked: checks it now.
    func checkIfUnchecked() {
        if lock.withLock({ lifecycle.beginCheck() }) { checkPath() }
    }

    /// Opens the path (the first time, or again after the channel let go
    /// of its fd: then without `.truncate`, `.exclusive` or `.create`, the
    /// same file or an error, at the stream position it had). `retried`:
    /// an open that waited for a path channel's fd to close
    /// (`PathDescriptors.waitForClose`) tries again.
    func openPath(retried: Bool = false) {
        guard let spec = pathSpec else { return }
        let (reopen, identity) = lock.withLock { (lifecycle.reopening, openedIdentity) }
        let permissions = spec.permissions?.rawValue ?? 0o666
        let flags = reopen == nil ? spec.openFlags : spec.reopenFlags
        Probe.open(engine: engine, path: spec.path, flags: flags, mode: UInt32(permissions)) { [self] result in
            switch result {
            case .failure(let error):
                if error == .tooManyOpenFiles || error == .tooManyOpenFilesInSystem {
                    if PathDescriptors.shared.waitForClose(retried: retried, { [self] in openPath(retried: true) }) {
                        return
                    }
                    // (waitForClose counted the retry.)
                    return pathFailed(error)
                }
                if reopen != nil, error == .noSuchFileOrDirectory {
                    return openFailed(error, retried: retried,
                                      detail: "the file this channel opened is no longer at this path")
                }
                openFailed(error, retried: retried)
            case .success(let fd):
                switch describe(fd: fd) {
                case .failure(let error):
                    openFailed(error, closing: fd, retried: retried)
                case .success(let (fileKind, found)):
                    openSucceeded(fd: fd, flags: flags, fileKind: fileKind, found: found, reopen: reopen,
                                  identity: identity, retried: retried)
                }
            }
        }
    }

    /// The open (through the engine or on this thread, with `flags`) gave
    /// `fd`, of `fileKind` and identity `found`: the channel is open, or fails when
    /// the file cannot serve it or a reopen found another file.
    private func openSucceeded(fd: Int32, flags: Int32, fileKind: FileKind, found: FileIdentity, reopen: Int64??,
                               identity: FileIdentity?, retried: Bool, nonblocking: Bool = false) {
        // The file may have changed since the check.
        if let error = fileKind.unusable(for: kind) { return openFailed(error, closing: fd, retried: retried) }
        if let reopen {
            // Renamed or replaced since: never another file.
            if found != identity {
                return openFailed(.staleNFSFileHandle, closing: fd, retried: retried,
                                  detail: "the path names another file than the one this channel opened")
            }
            if let position = reopen {
                do throws(Errno) { try Syscall.lseek(fd, position, SEEK_SET) } catch {
                    return openFailed(error, closing: fd, retried: retried)
                }
            }
        }
        pathOpened(FDEntry.owning(fd: fd, kind: fileKind, identity: found, flags: flags), identity: found,
                   retried: retried, unsettled: nonblocking ? flags : nil)
    }

    /// The open failed for good (a woken waiter's says so first).
    private func openFailed(_ error: Errno, closing fd: Int32? = nil, retried: Bool, detail: String? = nil) {
        if let fd { Syscall.closeIgnoringErrors(fd) }
        if retried { PathDescriptors.shared.retryFailed() }
        pathFailed(error, detail: detail)
    }

    private func pathOpened(_ entry: FDEntry, identity: FileIdentity, retried: Bool, unsettled: Int32? = nil) {
        lock.lock()
        if openedIdentity == nil { openedIdentity = identity }
        let actions = lifecycle.pathOpened(entry)
        unsettledFlags = unsettled
        // (Work that waited for the open goes to the entry now.)
        if !actions.pending.isEmpty { settleFlagsLocked() }
        var ready = FDEntry.Ready()
        for item in actions.pending {
            switch item {
            case .operation(let op): ready += op.enqueue(on: entry, base: 0)
            case .barrier(let work): ready += entry.enqueueBarrier(queue: queue, work)
            }
        }
        // (Only a regular file's channel ever lets go of its fd.)
        let holds = !lifecycle.isClosed && entry.kind == .regular
        let work = PathDescriptors.shared.opened(holder: holds ? self : nil, retried: retried,
                                                 closing: actions.handOffCleanup)
        let held = takeHeldLocked()
        lock.unlock()
        if let held { Syscall.closeIgnoringErrors(held) }
        PathDescriptors.shared.perform(work)
        entry.start(ready)
        if actions.handOffCleanup { entry.channelClosed(cleanup: .init(queue: queue, handler: cleanup)) }
    }

    private func pathFailed(_ error: Errno, detail: String? = nil) {
        let (actions, held) = lock.withLock { () -> (Lifecycle.FailedActions, Int32?) in
            if let detail { reopenDetail = detail }
            return (lifecycle.pathFailed(error), takeHeldLocked())
        }
        if let held { Syscall.closeIgnoringErrors(held) }
        for item in actions.pending {
            switch item {
            case .operation(let op): op.finishWithoutIO(error)
            case .barrier(let work): queue.async(work)
            }
        }
        if actions.runCleanup { runCleanup(error) }
    }
}

/// One-request helpers for the path channels: statx and openat through the
/// engine, the path and statx buffer kept alive in a `RequestMemory` until
/// completion.
enum Probe {
    static func statx(engine: IOEngine, path: FilePath, follow: Bool,
                      _ completion: @escaping @Sendable (Result<FileKind, Errno>) -> Void) {
        let memory = RequestMemory(paths: [path], statx: true)
        let flags = follow ? 0 : AT_SYMLINK_NOFOLLOW
        engine.submit(IORequest(.statx(directory: AT_FDCWD, path: memory.paths[0], flags: flags,
                                       mask: UInt32(STATX_TYPE), buffer: memory.statx!), owner: memory) { res in
            if res < 0 { return completion(.failure(Errno(rawValue: -res))) }
            completion(.success(FileType(mode: mode_t(memory.statx!.pointee.stx_mode))))
        })
    }

    static func open(engine: IOEngine, path: FilePath, flags: Int32, mode: UInt32,
                     _ completion: @escaping @Sendable (Result<Int32, Errno>) -> Void) {
        let memory = RequestMemory(paths: [path])
        engine.submit(IORequest(.openat(directory: AT_FDCWD, path: memory.paths[0], flags: flags, mode: mode),
                                owner: memory, mayBlock: true) { res in
            completion(res < 0 ? .failure(Errno(rawValue: -res)) : .success(res))
        })
    }
}

/// The path channels made unchecked (`ChannelCore.mayOpenBeforeCheck`)
/// whose first use may not come at once: a sweep checks every one that is
/// still unchecked a millisecond after it was made, so that a channel on a
/// missing path that nobody uses still fails (and runs its cleanup
/// handler) as one checked at creation does. A channel whose first read
/// came first is skipped. One timer per millisecond at most, whatever the
/// number of channels made.
///
/// The newest channel made waits in a slot of its own, with no lock: a
/// channel read as soon as it is made (the usual case) takes itself out of
/// it when its read opens it (`opened`), and never reaches the list. Made
/// while it still waits there, the next channel moves it to the list;
/// the sweep empties the slot into the list too.
enum UncheckedPaths {
    private struct State {
        /// The channels not yet swept, with when each was made (oldest first).
        var waiting: [(core: ChannelCore, made: UInt64)] = []
    }

    private static let state = Locked(State())
    private static let age: UInt64 = 1_000_000
    /// The newest channel made, not in `waiting`: a retained reference
    /// (`Unmanaged`), or 0.
    private static let newest = Atomic<UInt>(0)
    /// A sweep is scheduled. The sweep clears it before it empties the slot,
    /// and `add` fills the slot before it looks: a channel is always seen
    /// by a sweep to come.
    private static let scheduled = Atomic<Bool>(false)

    static func add(_ core: ChannelCore) {
        let bits = UInt(bitPattern: Unmanaged.passRetained(core).toOpaque())
        let previous = newest.exchange(bits, ordering: .sequentiallyConsistent)
        if previous != 0 { park(previous) }
        if !scheduled.load(ordering: .sequentiallyConsistent),
           !scheduled.exchange(true, ordering: .sequentiallyConsistent) {
            scheduleSweep()
        }
    }

    /// `core`'s first read opens it: out of the slot, if it is still there.
    static func opened(_ core: ChannelCore) {
        let bits = UInt(bitPattern: Unmanaged.passUnretained(core).toOpaque())
        // (The slot's reference keeps `core`'s address from being reused
        // while it is there.)
        if newest.compareExchange(expected: bits, desired: 0, ordering: .sequentiallyConsistent).exchanged {
            Unmanaged.passUnretained(core).release()
        }
    }

    /// A channel taken from the slot goes to the list.
    private static func park(_ bits: UInt) {
        let core = Unmanaged<ChannelCore>.fromOpaque(UnsafeRawPointer(bitPattern: bits)!).takeRetainedValue()
        state.withLock { $0.waiting.append((core, core.uncheckedSince)) }
    }

    private static func scheduleSweep() {
        IOQueue.global.asyncAfter(deadline: .now + .nanoseconds(Int64(age))) { sweep() }
    }

    private static func sweep() {
        scheduled.store(false, ordering: .sequentiallyConsistent)
        let taken = newest.exchange(0, ordering: .sequentiallyConsistent)
        if taken != 0 { park(taken) }
        let now = monotonicNanoseconds()
        let (due, again) = state.withLock { s -> ([ChannelCore], Bool) in
            // (Made in order, give or take channels made at once on two
            // threads: the old ones are a prefix.)
            let young = s.waiting.firstIndex { now &- $0.made < age } ?? s.waiting.count
            let due = s.waiting[..<young].map(\.core)
            s.waiting.removeFirst(young)
            return (due, !s.waiting.isEmpty)
        }
        if again, !scheduled.exchange(true, ordering: .sequentiallyConsistent) { scheduleSweep() }
        for core in due { core.checkIfUnchecked() }
    }
}
