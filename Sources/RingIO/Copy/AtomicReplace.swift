#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOChannel
@_spi(Engine) import RingIOEngine

/// The library's one way to replace a file atomically: the new contents go
/// into a temporary file beside the destination (`IO.temporaryPath(beside:)`,
/// the same directory, so the rename cannot cross a file system), which is
/// renamed onto the destination once complete (`commit`), or removed
/// (`abandon`). A reader sees the old file or the whole new one; a failed
/// or cancelled writer leaves the destination as it was and nothing under
/// its name half-written. `IO.writeFile(atomically: true)`, `IO.copyFile`
/// with `atomically`, `FileCopier` with `replace: .atomic` and every file
/// of `IO.copyItem` replace through it.
///
/// The caller creates and writes `temporary` (with `O_EXCL`: the name is
/// random, and a clash means another writer's file).
package struct AtomicReplace: Sendable, Hashable {
    /// The file that is replaced.
    package let destination: FilePath
    /// Where the new contents are written first.
    package let temporary: FilePath
    /// The rename fails with `EEXIST` when the destination exists
    /// (`RENAME_NOREPLACE`) rather than replacing it.
    package let noReplace: Bool

    /// A fresh temporary name beside `destination`.
    ///
    /// - Throws: `EINVAL` when `destination` has no last component.
    package init(replacing destination: FilePath, noReplace: Bool = false) throws(Errno) {
        guard let temporary = IO.temporaryPath(beside: destination) else { throw .invalidArgument }
        self.destination = destination
        self.temporary = temporary
        self.noReplace = noReplace
    }

    /// `temporary` (a name `IO.temporaryName(beside:tag:)` made, in
    /// `destination`'s directory) to be renamed onto `destination`.
    package init(replacing destination: FilePath, temporary: FilePath, noReplace: Bool = false) {
        self.destination = destination
        self.temporary = temporary
        self.noReplace = noReplace
    }

    /// Renames the temporary onto the destination, on the calling thread
    /// (one that may block: a pool worker).
    package func commit() throws(Errno) {
        try Syscall.rename(temporary, to: destination, noReplace: noReplace)
    }

    /// Renames the temporary onto the destination through `engine` (a
    /// `renameat2` request: the caller's thread does not wait on the file system).
    package func commit(engine: IOEngine) async throws(Errno) {
        let box = RequestMemory(paths: [temporary, destination])
        let res = await box.perform(engine: engine, .renameat(oldDirectory: AT_FDCWD, oldPath: box.paths[0],
                                                              newDirectory: AT_FDCWD, newPath: box.paths[1],
                                                              flags: noReplace ? UInt32(RENAME_NOREPLACE) : 0))
        if res < 0 { throw Errno(rawValue: -res) }
    }

    /// Removes the temporary (after a failure), ignoring errors: it may
    /// never have been created.
    package func abandon() {
        try? Syscall.unlink(temporary)
    }
}

extension IO {
    /// A free name beside `path` for a temporary file:
    /// `.name.ringio-PID-XXXX` in the same directory (PID: this process, in
    /// decimal; XXXX: random), so that a rename onto `path` is atomic and
    /// `removeStaleTemporaries(beside:)` can tell whose it is.
    ///
    /// - Returns: `nil` when `path` has no last component.
    public static func temporaryPath(beside path: FilePath) -> FilePath? {
        guard let name = path.lastComponent else { return nil }
        return path.removingLastComponent().appending(temporaryName(beside: name, tag: .random(in: 0 ... .max)))
    }

    /// The temporary name `temporaryPath(beside:)` makes for a file named
    /// `name`, with `tag` for its random part (a batch of files draws one
    /// random number and adds each file's index to it).
    package static func temporaryName(beside name: FilePath.Component, tag: UInt64) -> FilePath.Component {
        FilePath.Component("\(temporaryPrefix(beside: name))\(Syscall.getpid())-\(String(tag, radix: 36))")!
    }

    /// `.name.ringio-`, the part of a temporary's name before its PID. A
    /// name too long to leave room for the rest within NAME_MAX (255 bytes)
    /// is cut, at a whole Unicode scalar, to 225 bytes: 9 for the dots and
    /// `ringio-`, 21 for the longest PID (7 digits), a dash and a 64-bit tag
    /// in base 36 (13 digits).
    package static func temporaryPrefix(beside name: FilePath.Component) -> String {
        let full = name.string
        guard full.utf8.count > 225 else { return ".\(full).ringio-" }
        var kept = String.UnicodeScalarView()
        var bytes = 0
        for scalar in full.unicodeScalars {
            let width = UTF8.width(scalar)
            if bytes + width > 225 { break }
            kept.append(scalar)
            bytes += width
        }
        return ".\(String(kept)).ringio-"
    }

    /// Removes the temporary files beside `path` that a process killed
    /// before it could rename or remove them left behind (`IO.writeFile` with
    /// `atomically`, `IO.copyFile` with `atomically`, ringcp): the names
    /// `temporaryPath(beside: path)` makes, whose creating process no longer
    /// exists. A temporary of a live process (this one included) is never
    /// touched. `IO.writeFile` does this before its first write into a
    /// directory in a process (later ones skip the scan).
    ///
    /// - Returns: the number of files removed (0 when the directory cannot be read).
    @discardableResult
    public static func removeStaleTemporaries(beside path: FilePath) -> Int {
        removeStaleTemporaries(beside: path, onlyOncePerDirectory: false)
    }

    /// The directories whose stale temporaries this process has already
    /// looked for (`IO.writeFile` scans a directory once: a scan lists the
    /// whole directory, and a scan per write made writing n files into one
    /// directory cost O(n²)). Bounded: emptied when it reaches 1,024.
    private static let scannedDirectories = Locked(Set<String>())

    /// `removeStaleTemporaries(beside:)`, or nothing when `onlyOncePerDirectory`
    /// and this process has scanned `path`'s directory before.
    @discardableResult
    package static func removeStaleTemporaries(beside path: FilePath, onlyOncePerDirectory: Bool) -> Int {
        if onlyOncePerDirectory {
            let key = path.removingLastComponent().string
            let first = scannedDirectories.withLock { scanned in
                if scanned.count >= 1024 { scanned.removeAll(keepingCapacity: true) }
                return scanned.insert(key).inserted
            }
            guard first else { return 0 }
        }
        guard let name = path.lastComponent else { return 0 }
        let directory = path.removingLastComponent()
        let prefix = temporaryPrefix(beside: name)
        guard let names = try? Syscall.directoryEntries(directory.isEmpty ? "." : directory) else { return 0 }
        var stale: [String] = []
        for entryName in names {
            guard entryName.hasPrefix(prefix) else { continue }
            // PID-XXXX: the PID in decimal, then a random tag in base 36.
            let rest = entryName.dropFirst(prefix.count).split(separator: "-", maxSplits: 1)
            guard rest.count == 2, let pid = pid_t(rest[0]), pid > 0, !rest[1].isEmpty,
                  rest[1].allSatisfy({ $0.isASCII && ($0.isNumber || $0.isLowercase) }) else { continue }
            if !Syscall.processExists(pid) { stale.append(entryName) }
        }
        var removed = 0
        for entryName in stale where (try? Syscall.unlink(directory.appending(entryName))) != nil {
            removed += 1
        }
        return removed
    }
}
