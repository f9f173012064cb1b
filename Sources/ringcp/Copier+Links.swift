#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import SystemPackage

/// cp's rules around a copy: -i's question, backups, links in place of copies.
extension Copier {
    /// A question on stderr (cp's -i), answered on stdin: yes when the line starts with y or Y.
    func ask(_ question: String) -> Bool {
        writeAll(STDERR_FILENO, "\(programName): \(question)")
        var byte: UInt8 = 0
        var first: UInt8?
        while read(STDIN_FILENO, &byte, 1) == 1 && byte != UInt8(ascii: "\n") {
            if first == nil { first = byte }
        }
        return first == UInt8(ascii: "y") || first == UInt8(ascii: "Y")
    }

    /// `name~`, or `name.~N~` (numbered: one more than the highest there; existing: numbered if any is).
    func backupName(for path: FilePath) -> FilePath {
        let simple = FilePath(path.string + settings.suffix)
        guard settings.backup == .numbered || settings.backup == .existing, let base = path.lastComponent?.string else {
            return simple
        }
        let prefix = base + ".~"
        var highest = 0
        for name in (try? FS.entries(of: parentOf(path))) ?? [] {
            let text = name.string
            guard text.hasPrefix(prefix), text.hasSuffix("~"),
                  let n = Int(text.dropFirst(prefix.count).dropLast()) else { continue }
            highest = max(highest, n)
        }
        if settings.backup == .existing && highest == 0 { return simple }
        return FilePath(path.string + ".~\(highest + 1)~")
    }

    /// -l or -s: a hard or symbolic link to `source` at `destination`.
    /// - Parameter follow: a symlink at `source` is followed (the link goes to what it names).
    func makeLink(_ source: FilePath, _ status: FileStatus, to destination: FilePath, inNewDirectory: Bool, follow: Bool) {
        var linkFrom = source
        if !inNewDirectory, let existing = try? FileStatus.ifPresent(destination, followingSymlinks: false) {
            if settings.noClobber { return }
            if existing.kind == .directory {
                return report("cannot overwrite directory '\(destination)' with non-directory")
            }
            if existing.isSameFile(as: status) {
                // A symlink onto the file it would name makes a loop and loses the file: never.
                // A hard link: already one (cp: nothing to do), or with -fb onto
                // its own name, the backup linked back.
                guard settings.link == .hard else {
                    return report("'\(source)' and '\(destination)' are the same file")
                }
                guard settings.backup != .none && settings.force && sameName(source, destination) else { return }
                linkFrom = backupName(for: destination)
            } else if settings.link == .hard, existing.kind != .symlink,
                      let named = try? FileStatus.of(source, followingSymlinks: true), named.isSameFile(as: existing) {
                // A symlink to the destination, not followed (-d): the file it names is there already (cp: nothing to do).
                return
            }
            if settings.backup != .none {
                if FS.rename(destination, backupName(for: destination)) != 0 {
                    return reportError("cannot backup", destination, Errno(rawValue: errno))
                }
            } else if !settings.force && !settings.removeDestination {
                return report("cannot create \(settings.link == .hard ? "hard link" : "symlink") '\(destination)' to '\(source)': File exists")
            } else if FS.unlink(destination) != 0 {
                return reportError("cannot remove", destination, Errno(rawValue: errno))
            }
        }
        let rc = settings.link == .hard
            ? linkFrom.withPlatformString { from in
                destination.withPlatformString { linkat(AT_FDCWD, from, AT_FDCWD, $0, follow ? AT_SYMLINK_FOLLOW : 0) }
            }
            : FS.symlink(source, destination)
        if rc != 0 {
            let kind = settings.link == .hard ? "hard link" : "symlink"
            return report("cannot create \(kind) '\(destination)' to '\(source)': \(describe(Errno(rawValue: errno)))")
        }
        announce(source, destination)
    }

    /// The same directory entry: the same name in the same directory (cp's "same name").
    func sameName(_ a: FilePath, _ b: FilePath) -> Bool {
        guard a.lastComponent == b.lastComponent,
              let x = try? FileStatus.of(parentOf(a), followingSymlinks: true),
              let y = try? FileStatus.of(parentOf(b), followingSymlinks: true) else { return false }
        return x.isSameFile(as: y)
    }

    /// --preserve=links: `source` is another name of a file copied to `first`.
    func linkToCopy(_ first: FilePath, _ source: FilePath, to destination: FilePath, inNewDirectory: Bool) {
        if !inNewDirectory, let existing = try? FileStatus.ifPresent(destination, followingSymlinks: false) {
            if settings.noClobber { return }
            if existing.kind == .directory {
                return report("cannot overwrite directory '\(destination)' with non-directory")
            }
            _ = FS.unlink(destination)
        }
        if FS.link(first, destination) != 0 {
            return reportError("cannot create hard link", destination, Errno(rawValue: errno))
        }
        announce(source, destination)
    }
}
