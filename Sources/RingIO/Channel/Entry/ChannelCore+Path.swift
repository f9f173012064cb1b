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
    /// When the channel was last used, on `PathDescriptors.clock`.
    var lastUse: UInt64 { lastUseStamp.load(ordering: .relaxed) }

    /// A path channel is used: it becomes the most recently used.
    @inline(__always)
    func touch() {
        // A load and a store, not a read-modify-write on every use: two
        // channels used at once may get the same stamp, which only makes
        // their order in the least-recently-used release arbitrary.
        guard let descriptors = pathDescriptors else { return }
        let now = descriptors.clock.load(ordering: .relaxed) &+ 1
        descriptors.clock.store(now, ordering: .relaxed)
        lastUseStamp.store(now, ordering: .relaxed)
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
        PathDescriptors.run(stalled)
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

    /// The asynchronous check of a path channel's path (statx; with `.create`
    /// and no file, its directory).
    func checkPath() {
        guard let spec = pathSpec else { return }
        let follow = !spec.options.contains(.noFollow)
        Probe.statx(engine: engine, path: spec.path, follow: follow) { [self] result in
            switch result {
            case .success(let fileKind):
                if let error = fileKind.unusable(for: kind) { return pathFailed(error) }
                pathChecked()
            case .failure(.noSuchFileOrDirectory) where spec.options.contains(.create):
                Probe.statx(engine: engine, path: spec.path.removingLastComponent(), follow: true) { [self] parent in
                    switch parent {
                    case .success(.directory): pathChecked()
                    case .success: pathFailed(.notDirectory)
                    case .failure(let error): pathFailed(error)
                    }
                }
            case .failure(let error):
                pathFailed(error)
            }
        }
    }

    private func pathChecked() {
        let open = lock.withLock { lifecycle.pathChecked() }
        if open { openPath() }
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
            /// The open failed for good (a woken waiter's says so first).
            func failed(_ error: Errno, closing fd: Int32? = nil, detail: String? = nil) {
                if let fd { Syscall.closeIgnoringErrors(fd) }
                if retried { PathDescriptors.shared.retryFailed() }
                pathFailed(error, detail: detail)
            }
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
                    return failed(error, detail: "the file this channel opened is no longer at this path")
                }
                failed(error)
            case .success(let fd):
                switch describe(fd: fd) {
                case .failure(let error):
                    failed(error, closing: fd)
                case .success(let (fileKind, found)):
                    // The file may have changed since the check.
                    if let error = fileKind.unusable(for: kind) { return failed(error, closing: fd) }
                    if let reopen {
                        // Renamed or replaced since: never another file.
                        if found != identity {
                            return failed(.staleNFSFileHandle, closing: fd,
                                          detail: "the path names another file than the one this channel opened")
                        }
                        if let position = reopen {
                            do throws(Errno) { try Syscall.lseek(fd, position, SEEK_SET) } catch {
                                return failed(error, closing: fd)
                            }
                        }
                    }
                    pathOpened(FDEntry.owning(fd: fd, kind: fileKind, identity: found), identity: found,
                               retried: retried)
                }
            }
        }
    }

    private func pathOpened(_ entry: FDEntry, identity: FileIdentity, retried: Bool) {
        lock.lock()
        if openedIdentity == nil { openedIdentity = identity }
        let actions = lifecycle.pathOpened(entry)
        var ready = FDEntry.Ready()
        for item in actions.pending {
            switch item {
            case .operation(let op): ready += op.enqueue(on: entry, base: 0)
            case .barrier(let work): ready += entry.enqueueBarrier(queue: queue, work)
            }
        }
        // (Only a regular file's channel ever lets go of its fd.)
        if !lifecycle.isClosed && entry.kind == .regular { PathDescriptors.shared.hold(self) }
        lock.unlock()
        PathDescriptors.shared.opened(retried: retried, closing: actions.handOffCleanup)
        entry.start(ready)
        if actions.handOffCleanup { entry.channelClosed(cleanup: .init(queue: queue, handler: cleanup)) }
    }

    private func pathFailed(_ error: Errno, detail: String? = nil) {
        let actions = lock.withLock { () -> Lifecycle.FailedActions in
            if let detail { reopenDetail = detail }
            return lifecycle.pathFailed(error)
        }
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
