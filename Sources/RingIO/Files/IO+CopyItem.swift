#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOChannel
import RingIOCopy
@_spi(Engine) import RingIOEngine

extension IO {
    /// Copies the file, symlink or directory tree at `source` to
    /// `destination`.
    ///
    /// A regular file is copied with ``copyFile(from:to:options:engine:)``
    /// and `options` (the copy engine: its plan chooses how the bytes
    /// move); a symlink is created anew with the same target (never
    /// followed, unless `options.followSymlinks` says so); a directory is
    /// created with the source's permissions and its tree copied: entries
    /// listed by ``directoryEntries(at:recursive:)`` (never more than 32
    /// directories open), up to `options.maximumConcurrentCopies` files
    /// copied at once. A directory's regular files go in batches of up to
    /// 32 (up to `maximumConcurrentCopies` batches at once, at most four
    /// per core, two per core into one directory), each copied on one
    /// worker of `IOQueue.global`, opened by
    /// its name relative to the two directories: one hand-off for the
    /// batch, not one per file (a file larger than `IO.smallFileLimit` is
    /// then copied on its own). With `options.atomically`, each is written
    /// under a temporary name in its directory and renamed onto its own. A
    /// directory already at a directory's destination is used, unless
    /// `options.exclusive`. A symlink the copy creates is never
    /// written through: each path is created once.
    ///
    /// `options.preserve` applies to every entry: a file's attributes are
    /// set on it before it is closed (and renamed into place), a symlink's
    /// own owner and times after it is made, and a directory's once all
    /// its entries are copied (its times would change otherwise). A
    /// directory is created writable by its owner, whatever the source's
    /// permissions, and given them at the end, so that a read-only
    /// directory's entries can be copied into it.
    ///
    /// ```swift
    /// var options = IO.CopyOptions()
    /// options.preserve = [.permissions, .times]
    /// try await IO.copyItem(from: "Sources", to: "/tmp/Sources-copy", options: options)
    /// ```
    ///
    /// - Parameters:
    ///   - source: what to copy.
    ///   - destination: its copy's path.
    ///   - options: how each file is copied (`exclusive`: fail with
    ///     `EEXIST` where anything exists at a destination path;
    ///     `preserve`: the metadata every entry takes; `followSymlinks`,
    ///     `maximumConcurrentCopies`).
    /// - Throws: an ``IOError`` naming the entry that failed and its side;
    ///   the copy stops there (what was copied stays; a file that failed
    ///   leaves nothing under its name).
    public static func copyItem(from source: FilePath, to destination: FilePath,
                                options: CopyOptions = .init()) async throws(IOError) {
        try await TreeCopy(options: options, handlers: nil).copyItem(from: source, to: destination)
    }

    /// Copies the file, symlink or directory tree at `source` to
    /// `destination` as ``copyItem(from:to:options:)`` does, asking
    /// `onEntry` about each entry before it is copied and `onError` about
    /// each failure.
    ///
    /// `onEntry` is called once for every entry, `source` itself first,
    /// with its path on both sides and its type (a symlink that
    /// `options.followSymlinks` follows has the type of what it names). Its
    /// answer says what happens to it:
    /// - ``CopyItemAction/copy``: the copy does it, as `copyItem(from:to:options:)` would
    ///   (a directory is made, its entries visited, its attributes set at the end);
    /// - ``CopyItemAction/skip``: nothing (a directory's entries are not visited);
    /// - ``CopyItemAction/copied``: the handler has copied it itself (a
    ///   directory: the handler made the directory, or chose to use the one
    ///   there; its entries are visited, and nothing is set on it).
    ///
    /// A directory's `onEntry` returns before any of its entries' is
    /// called; entries that are not directories are handled up to
    /// `options.maximumConcurrentCopies` at once, so both handlers must be
    /// safe to call from several tasks. With `maximumConcurrentCopies` 1,
    /// every call comes in the order the entries are listed, one at a time.
    ///
    /// `onError` gets each failure of the copy's own work: the source that
    /// cannot be stat'ed, a directory that cannot be listed or made, an
    /// entry answered `.copy` that fails, a symlink loop. ``CopyItemErrorAction/stop``
    /// ends the copy, which throws that error; ``CopyItemErrorAction/continue`` goes on
    /// without the entry (a directory: without its entries), and the copy
    /// then returns normally. Cancelling the task stops the copy with
    /// `ECANCELED` whatever `onError` says. This is how `ringcp -r`
    /// applies cp's rules (`-n`, `-i`, `-u`, backups, messages) and goes on
    /// after an error, as cp does:
    ///
    /// ```swift
    /// try await IO.copyItem(from: "photos", to: "/mnt/usb/photos", onEntry: { entry in
    ///     // Leave out what is already there; copy the rest.
    ///     if entry.type != .directory, (try? await IO.info(at: entry.destination)) != nil { return .skip }
    ///     return .copy
    /// }, onError: { error in
    ///     print("not copied: \(error)")
    ///     return .continue
    /// })
    /// ```
    ///
    /// - Throws: the ``IOError`` that `onError` answered `.stop` to, or `ECANCELED`.
    public static func copyItem(from source: FilePath, to destination: FilePath, options: CopyOptions = .init(),
                                onEntry: @escaping @Sendable (CopyItemEntry) async -> CopyItemAction,
                                onError: @escaping @Sendable (IOError) async -> CopyItemErrorAction = { _ in .stop })
        async throws(IOError) {
        try await TreeCopy(options: options, handlers: TreeCopy.Handlers(onEntry: onEntry, onError: onError))
            .copyItem(from: source, to: destination)
    }

    /// One entry that ``copyItem(from:to:options:onEntry:onError:)`` is about to copy.
    public struct CopyItemEntry: Sendable, Hashable {
        /// The entry: the source as given, then the names down to it.
        public var source: FilePath
        /// Where its copy goes: the destination as given, then the same names.
        public var destination: FilePath
        /// What it is (for a followed symlink, what it names).
        public var type: FileInfo.FileType
        /// The item the copy was called with, not an entry below it.
        public var isTop: Bool

        /// An entry; the copy makes them.
        public init(source: FilePath, destination: FilePath, type: FileInfo.FileType, isTop: Bool) {
            self.source = source
            self.destination = destination
            self.type = type
            self.isTop = isTop
        }
    }

    /// What ``copyItem(from:to:options:onEntry:onError:)`` does with an entry.
    public enum CopyItemAction: Sendable, Hashable {
        /// Copy it (a directory: make it and visit its entries).
        case copy
        /// Leave it (a directory: and its entries) out.
        case skip
        /// The handler copied it (a directory: made it, or uses the one there); visit a directory's entries.
        case copied
    }

    /// What ``copyItem(from:to:options:onEntry:onError:)`` does after a failure.
    public enum CopyItemErrorAction: Sendable, Hashable {
        /// End the copy, throwing the error.
        case stop
        /// Go on with the other entries.
        case `continue`
    }
}
