import CLiburing
import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// An error from one of RingIO's path-level APIs (`IO.readFile`, `IO.writeFile`,
/// `IO.copyFile`, path channels, the file copier): what was being done, to
/// which file, and the system's error number.
///
/// Channel handlers and fd-level APIs report a bare `Errno`; the APIs that
/// take paths throw an `IOError`, so the message names the file:
///
/// ```
/// Unable to open '/x/y' for reading: No such file or directory (ENOENT)
/// ```
///
/// Match it by its errno as you would an `Errno`, where the `do` block's
/// error type is `IOError` (every RingIO API that throws it is typed
/// `throws(IOError)`, so a `do` around RingIO calls only infers it):
///
/// ```swift
/// do {
///     let bytes = try await IO.readFile(at: "config.json")
/// } catch Errno.noSuchFileOrDirectory {
///     // use the defaults
/// } catch {
///     print(error)          // the whole story: operation, path, errno
/// }
/// ```
///
/// Once the error has become an `any Error` (thrown on by a function
/// declared plain `throws`), `catch Errno.x` no longer sees it: match
/// `catch let error as IOError where error.errno == .noSuchFileOrDirectory`.
public struct IOError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What RingIO was doing when the error happened.
    public struct Operation: Sendable, Hashable, CustomStringConvertible {
        /// A phrase that completes "Unable to …", such as "open '…' for reading".
        let verb: String
        let suffix: String

        public var description: String { verb + suffix }

        init(_ verb: String, _ suffix: String = "") {
            self.verb = verb
            self.suffix = suffix
        }

        /// Opening a file to read it.
        public static let openForReading = Operation("open", " for reading")
        /// Opening (or creating) a file to write it.
        public static let openForWriting = Operation("open", " for writing")
        /// Opening a file to read and write it.
        public static let open = Operation("open")
        /// Creating a file or directory.
        public static let create = Operation("create")
        /// Reading a file's metadata (`stat`, `statx`).
        public static let stat = Operation("stat")
        /// Reading bytes.
        public static let read = Operation("read")
        /// Writing bytes.
        public static let write = Operation("write")
        /// Flushing a file to its storage (`fsync`).
        public static let synchronize = Operation("sync")
        /// Renaming a file into place.
        public static let rename = Operation("rename")
        /// Removing a file.
        public static let remove = Operation("remove")
        /// Copying one file to another (a failure not pinned to one side).
        public static let copy = Operation("copy")
        /// Setting a file's attributes (mode, owner, times).
        public static let setAttributes = Operation("set attributes of")
        /// Closing a file.
        public static let close = Operation("close")
        /// Listing a directory (opening it, reading its entries).
        public static let list = Operation("list")
        /// Reading a symbolic link's target.
        public static let readLink = Operation("read the link")
        /// Moving a file or directory to another name.
        public static let move = Operation("move")
        /// Copying onto the source itself (the same file by another name:
        /// a hard link, a symlink to it): refused before anything is
        /// truncated, with `EINVAL`.
        public static let copyOntoSource = Operation("copy onto", ", the same file as the source")
    }

    /// Which file of a copy the error concerns.
    public enum Side: Sendable, Hashable {
        /// The file being copied from.
        case source
        /// The file being copied to.
        case destination
    }

    /// What was being done.
    public var operation: Operation
    /// The file concerned, when there is one.
    public var path: FilePath?
    /// For a copy: the side the error concerns; `nil` elsewhere.
    public var side: Side?
    /// The system's error number.
    public var errno: Errno
    /// More about the failure, when the errno alone does not say it
    /// ("more than the maximum size of 1024 bytes").
    public var detail: String?

    /// An error for `operation` on `path` (the side of a copy, if any).
    ///
    /// - Parameters:
    ///   - operation: what was being done.
    ///   - path: the file concerned, if any.
    ///   - side: for a copy, which file the error concerns.
    ///   - errno: the system's error number.
    ///   - detail: more words for the description, if the errno is not enough.
    public init(_ operation: Operation, path: FilePath?, side: Side? = nil, errno: Errno, detail: String? = nil) {
        self.operation = operation
        self.path = path
        self.side = side
        self.errno = errno
        self.detail = detail
    }

    /// "Unable to open '/x/y' for reading: No such file or directory (ENOENT)".
    public var description: String {
        var text = "Unable to \(operation.verb)"
        if let path { text += " '\(path)'" }
        text += operation.suffix
        text += ": \(errno)"
        if let name = IOError.symbolicName(of: errno) { text += " (\(name))" }
        if let detail { text += ": \(detail)" }
        return text
    }

    /// The errno's symbolic name ("ENOENT"), where the C library knows it.
    static func symbolicName(of errno: Errno) -> String? {
        guard let name = cliburing_errno_name(errno.rawValue) else { return nil }
        return String(cString: name)
    }

    /// Matches an `IOError` by its errno: `catch Errno.noSuchFileOrDirectory`.
    public static func ~= (pattern: Errno, value: IOError) -> Bool {
        value.errno == pattern
    }
}
