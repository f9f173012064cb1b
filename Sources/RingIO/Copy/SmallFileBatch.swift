#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import SystemPackage
import RingIOBase
import RingIOChannel
import RingIOQueue

/// Small regular files of one directory copied into one other directory,
/// one after another on one worker of `IOQueue.global`: one hand-off in
/// and one out for the whole batch, and every file opened by its name
/// relative to the two directories (`openat`), not by its whole path.
///
/// ```
///  caller (a tree copy's task)     pool worker
///  ───────────────────────────     ───────────
///  submit ─────────────────────▶  open both directories
///                                 per file: openat, fstat, openat (create), read, write, close, close
///                                 [atomically: fstatat the name first; create a temporary; renameat it onto the name]
///  resumes ◀─────────────────────  one result per file
/// ```
///
/// With `atomically`, each file is written under a temporary name in the
/// destination directory (`IO.temporaryName(beside:tag:)`, created
/// `O_EXCL`) and renamed onto its own name (`renameat2`, both relative to
/// the directory; `RENAME_NOREPLACE` with `exclusive`); a failure removes
/// the temporary, so nothing half-written is ever under a final name. No
/// file is flushed (`CopyOptions.atomically` promises none).
///
/// Each file is copied as `FileCopier` copies a small regular file in
/// place (`SmallFileCopy`), with the same checks and errors. A file that is
/// not a small regular file once open (larger than `IO.smallFileLimit`, a
/// FIFO put there meanwhile) is left as it was found, nothing created for
/// it, and comes back `.general`, for the caller's general path; so does
/// every file where a directory cannot be opened (its own copy then
/// reports the error).
package enum SmallFileBatch {
    /// One file: its name in both directories, and its paths for errors.
    package struct Item: Sendable {
        package var name: FilePath.Component
        package var source: FilePath
        package var destination: FilePath

        package init(name: FilePath.Component, source: FilePath, destination: FilePath) {
            self.name = name
            self.source = source
            self.destination = destination
        }
    }

    /// What became of one file.
    package enum Result: Sendable {
        case copied(Int64)
        case failed(IOError)
        /// Not copied, nothing left behind: copy it by the general path.
        case general
    }

    /// How the files are created.
    package struct Settings: Sendable {
        /// Fail with `EEXIST` where a file exists (else written in place,
        /// or replaced with `atomically`).
        package var exclusive = false
        /// Each file written under a temporary name in the destination
        /// directory, then renamed onto its own (`CopyOptions.atomically`).
        package var atomically = false
        package var permissions: FilePermissions?
        package var modeMask: CModeT = 0o7777
        package var preserve: IO.CopyOptions.Preserved = []
        package var reflink: FileCopier.Reflink = .never

        package init(_ options: IO.CopyOptions) {
            exclusive = options.exclusive
            atomically = options.atomically
            permissions = options.permissions
            modeMask = options.copiesSpecialModeBits ? 0o7777 : 0o777
            preserve = options.preserve
            reflink = options.reflink
        }
    }

    /// Copies `items` from `sourceDirectory` into `destinationDirectory`
    /// (absolute paths), in order, on one pool worker (or on this thread,
    /// where blocking calls are allowed). A cancellation of the task stops
    /// the batch between two files: the rest fail with `ECANCELED`.
    /// - Returns: one result for each item, in order.
    package static func copy(_ items: [Item], from sourceDirectory: FilePath, to destinationDirectory: FilePath,
                             settings: Settings) async -> [Result] {
        let cancelled = CancelFlag()
        let work: @Sendable () -> [Result] = {
            run(items, from: sourceDirectory, to: destinationDirectory, settings: settings, cancelled: cancelled)
        }
        return await withTaskCancellationHandler {
            await BlockingCalls.run(work)
        } onCancel: {
            cancelled.set()
        }
    }

    /// Set once the task is cancelled; read between two files.
    private final class CancelFlag: Sendable {
        private let flag = Atomic<Bool>(false)
        func set() { flag.store(true, ordering: .relaxed) }
        var isSet: Bool { flag.load(ordering: .relaxed) }
    }

    /// A directory to name files in (`O_PATH`: nothing is read through it,
    /// so it needs no read permission).
    private static func openDirectory(_ path: FilePath) -> CInt? {
        try? Syscall.withPath(path) { (p) throws(Errno) in
            try Syscall.openat(AT_FDCWD, p, flags: Syscall.pathOnly | O_DIRECTORY | O_CLOEXEC)
        }
    }

    private static func run(_ items: [Item], from sourceDirectory: FilePath, to destinationDirectory: FilePath,
                            settings: Settings, cancelled: CancelFlag) -> [Result] {
        guard let from = openDirectory(sourceDirectory) else { return items.map { _ in .general } }
        defer { Syscall.closeIgnoringErrors(from) }
        guard let into = openDirectory(destinationDirectory) else { return items.map { _ in .general } }
        defer { Syscall.closeIgnoringErrors(into) }
        var results: [Result] = []
        results.reserveCapacity(items.count)
        // Atomic: one random number for the batch, each file's temporary tagged with it plus its index.
        let tag = settings.atomically ? UInt64.random(in: 0 ... .max) : 0
        for (index, item) in items.enumerated() {
            if cancelled.isSet {
                results.append(.failed(IOError(.openForReading, path: item.source, side: .source, errno: .canceled)))
                continue
            }
            let paths: PathRequest.Paths
            var temporary: FilePath.Component? = nil
            if settings.atomically {
                let name = IO.temporaryName(beside: item.name, tag: tag &+ UInt64(index))
                temporary = name
                let replace = AtomicReplace(replacing: item.destination,
                                            temporary: item.destination.removingLastComponent().appending(name),
                                            noReplace: settings.exclusive)
                paths = PathRequest.Paths(source: item.source, replacing: replace)
            } else {
                paths = PathRequest.Paths(source: item.source, inPlace: item.destination)
            }
            // The file written is created exclusively where it is new by
            // design (a temporary) or by request (`exclusive`).
            var copy = BlockingCopy(paths: paths, permissions: settings.permissions,
                                    createNew: settings.exclusive || settings.atomically,
                                    request: CopyPlan.Request(reflink: settings.reflink),
                                    preserve: settings.preserve, sync: false, readable: false,
                                    sourceIsRegular: true, modeMask: settings.modeMask)
            copy.sourceAt = from
            copy.sourceName = .component(item.name)
            copy.targetAt = into
            if let temporary {
                copy.targetName = .component(temporary)
                copy.destinationName = .component(item.name)
            } else {
                copy.targetName = .component(item.name)
            }
            switch copy.run() {
            case .copied(let bytes):
                results.append(.copied(bytes))
            case .failed(let error):
                results.append(.failed(error))
            case .notSmall(let pair):
                // Left for the general path as it was found: a file this
                // batch created (a temporary, or the new file in place)
                // goes again (the general path creates it).
                Syscall.closeIgnoringErrors(pair.input)
                Syscall.closeIgnoringErrors(pair.output)
                if pair.created { copy.removeTarget() }
                results.append(.general)
            case .changed, nil:
                results.append(.general)
            }
        }
        return results
    }
}
