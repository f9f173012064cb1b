#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import Synchronization
import SystemPackage

extension Copier {
    /// A FIFO, a device or a socket on either side: the bytes as they come,
    /// straight into the destination, as cp does. ringcp opens both files
    /// (a FIFO's open may wait without end for its other side; see
    /// `Blocking`), then the library's `FileCopier` streams the bytes:
    /// never through a temporary file (a FIFO replaced by a regular file
    /// would leave its reader with nothing; a device cannot be renamed onto),
    /// never by the size a stat gave (a FIFO has none), and each byte once.
    func copyStream(_ source: FilePath, _ plan: Plan) async -> FileCopier.Outcome? {
        let (input, openError) = Blocking.call { FS.open(source, O_RDONLY | O_CLOEXEC | O_NOCTTY) }
        if input < 0 {
            report("cannot open '\(source)' for reading: \(describe(openError))")
            return nil
        }
        defer { close(input) }
        let created = plan.existing == nil
        // An existing regular file is truncated and written in place; a FIFO
        // or a device is only opened (a FIFO's open waits for its reader).
        let flags = O_WRONLY | O_CLOEXEC | O_NOCTTY
            | (created ? O_CREAT | O_EXCL : plan.existing?.kind == .regular ? O_TRUNC : 0)
        let (output, createError) = Blocking.call { FS.open(plan.destination, flags, plan.creationMode) }
        if output < 0 {
            reportError("cannot create regular file", plan.shownDestination, createError)
            return nil
        }
        var copier = copier(for: plan, atomically: false)
        copier.sparse = .auto  // zeros written as they come: a pipe has no holes
        let outcome: FileCopier.Outcome
        do throws(IOError) {
            // A read of a silent FIFO cannot be cancelled on every backend: a signal then ends ringcp as it ends cp.
            outcome = try await Blocking.during { () async throws(IOError) -> FileCopier.Outcome in
                try await copier.copy(from: FileDescriptor(rawValue: input), to: FileDescriptor(rawValue: output),
                                      sourcePath: source, destinationPath: plan.shownDestination)
            }
        } catch {
            close(output)
            if created { _ = FS.unlink(plan.destination) }
            reportCopyError(error, source, plan)
            return nil
        }
        if close(output) != 0 {
            reportError("error writing", plan.shownDestination, Errno(rawValue: errno))
            if created { _ = FS.unlink(plan.destination) }
            return nil
        }
        if created && !settings.preserve.contains(.mode) && (plan.mode & ~umask) != plan.mode { _ = FS.chmod(plan.destination, plan.mode) }
        return outcome
    }
}

/// System calls that may wait without end (opening a FIFO that has no reader
/// or writer, reading one that stays silent): a signal cannot cancel them as
/// it cancels the ring's requests. While one runs, a signal ends ringcp as it
/// ends cp (`RingCP`'s handler looks at `Blocking.stuckMark`).
enum Blocking {
    /// Calls running now, and calls started so far.
    private static let state = Mutex((running: 0, started: UInt64(0)))

    /// While a call runs: how many had started by then (the same number
    /// later, with a call still running, means no call has returned since).
    static var stuckMark: UInt64? { state.withLock { $0.running > 0 ? $0.started : nil } }

    /// Runs `body` counted as one call that may wait without end.
    static func during<T>(_ body: () async throws(IOError) -> T) async throws(IOError) -> T {
        state.withLock {
            $0.running += 1
            $0.started += 1
        }
        defer { state.withLock { $0.running -= 1 } }
        return try await body()
    }

    /// Runs `call` counted, and returns its result with the errno it left.
    static func call(_ call: () -> Int32) -> (Int32, Errno) {
        state.withLock {
            $0.running += 1
            $0.started += 1
        }
        let result = call()
        let error = Errno(rawValue: errno)
        state.withLock { $0.running -= 1 }
        return (result, error)
    }
}
