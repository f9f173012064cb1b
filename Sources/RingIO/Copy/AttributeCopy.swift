#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOChannel

/// The source's metadata onto a copy, as `IO.CopyOptions.preserve` asks:
/// the owner first (a `chown` clears set-user-ID bits), then the
/// permission bits, then the times (last: nothing after them changes the
/// modification time). Plain calls, on a thread that may block.
package enum AttributeCopy {
    /// Onto the open file `fd`.
    package static func apply(_ preserve: IO.CopyOptions.Preserved, from source: Stat, to fd: Int32) throws(Errno) {
        let raw = source.rawValue
        if preserve.contains(.owner) {
            try permitted({ () throws(Errno) in try Syscall.fchown(fd, user: raw.st_uid, group: raw.st_gid) },
                          orGroup: { () throws(Errno) in try Syscall.fchown(fd, user: .max, group: raw.st_gid) })
        }
        if preserve.contains(.permissions) {
            try Syscall.fchmod(fd, FilePermissions(rawValue: CModeT(raw.st_mode & 0o7777)))
        }
        if preserve.contains(.times) {
            try Syscall.utimensat(fd, nil, times: (raw.st_atim, raw.st_mtim))
        }
    }

    /// Onto the file at `path` (`followingSymlinks: false`: a symlink
    /// itself, whose permission bits Linux does not keep).
    package static func apply(_ preserve: IO.CopyOptions.Preserved, owner: (user: UInt32, group: UInt32),
                              permissions: FilePermissions, times: (access: timespec, modification: timespec),
                              to path: FilePath, followingSymlinks: Bool) throws(Errno) {
        let flags = followingSymlinks ? 0 : AT_SYMLINK_NOFOLLOW
        try Syscall.withPath(path) { (p) throws(Errno) in
            if preserve.contains(.owner) {
                try permitted({ () throws(Errno) in
                    try Syscall.fchownat(AT_FDCWD, p, user: owner.user, group: owner.group, flags: flags)
                }, orGroup: { () throws(Errno) in
                    try Syscall.fchownat(AT_FDCWD, p, user: .max, group: owner.group, flags: flags)
                })
            }
            if preserve.contains(.permissions) && followingSymlinks {
                try Syscall.fchmodat(AT_FDCWD, p, permissions)
            }
            if preserve.contains(.times) {
                try Syscall.utimensat(AT_FDCWD, p, times: times, flags: flags)
            }
        }
    }

    /// The owner and group where permitted: else the group alone, else
    /// neither (`EPERM`), as `cp -p`.
    private static func permitted(_ both: () throws(Errno) -> Void, orGroup group: () throws(Errno) -> Void) throws(Errno) {
        do throws(Errno) { try both() } catch where error == .notPermitted {
            do throws(Errno) { try group() } catch where error == .notPermitted {}
        }
    }
}
