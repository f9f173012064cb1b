#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// Watches one open file or directory for changes (libdispatch's vnode
/// source; its Linux build has none).
///
/// - `.write`: the file's data changed (or, for a directory, an entry was
///   added, removed or renamed in it);
/// - `.extend`: it grew;
/// - `.attrib`: its metadata changed (mode, owner, times);
/// - `.link`: its link count changed (unlinking one of two names is
///   `.link` only);
/// - `.delete`: its last name was unlinked (the open file lives on);
/// - `.rename`: it was renamed or moved;
/// - `.revoke`: its file system was unmounted.
///
/// The events come from one inotify fd per engine, read through the ring
/// (a multishot poll, then a read on the ring thread); a write is seen in
/// tens of microseconds. ``IOSource/data`` (and ``eventsSinceLastDelivery``)
/// is the set of events since the last delivery, limited to `events`.
///
/// ```swift
/// let file = try FileDescriptor.open("/tmp/watched.log", .readOnly, options: .create, permissions: .ownerReadWrite)
/// let watcher = IOFileSystemSource(fileDescriptor: file, events: [.write, .extend, .delete],
///                                  queue: IOQueue(label: "watch"))
/// watcher.setEventHandler { print("changed: \(watcher.eventsSinceLastDelivery)") }
/// watcher.setCancelHandler { try? file.close() }
/// watcher.activate()
/// ```
///
/// `.extend` and `.link` compare the file's size and link count with those
/// seen at the previous event: a change and its undoing that the engine
/// reads in one batch (a link and an unlink a few microseconds apart) show
/// as `.attrib` only.
///
/// Each watched file takes one inotify watch of the user's
/// (`/proc/sys/fs/inotify/max_user_watches`); past the limit, activation
/// fails and ``IOSource/registrationError`` is `ENOSPC`.
///
/// The corresponding libdispatch type is `DISPATCH_SOURCE_TYPE_VNODE`.
public final class IOFileSystemSource: IOSource, @unchecked Sendable {
    // @unchecked: `tracked` and `wd` are each `Locked`; the rest is immutable.

    /// What a file-system source reports (libdispatch's `NOTE_*` values).
    public struct Event: OptionSet, Sendable, CustomStringConvertible {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Its last name was unlinked. `DISPATCH_VNODE_DELETE`.
        public static let delete = Event(rawValue: 0x01)
        /// Its data changed; a directory's entries changed. `DISPATCH_VNODE_WRITE`.
        public static let write = Event(rawValue: 0x02)
        /// It grew. `DISPATCH_VNODE_EXTEND`.
        public static let extend = Event(rawValue: 0x04)
        /// Its metadata changed. `DISPATCH_VNODE_ATTRIB`.
        public static let attrib = Event(rawValue: 0x08)
        /// Its link count changed. `DISPATCH_VNODE_LINK`.
        public static let link = Event(rawValue: 0x10)
        /// It was renamed or moved. `DISPATCH_VNODE_RENAME`.
        public static let rename = Event(rawValue: 0x20)
        /// Its file system was unmounted. `DISPATCH_VNODE_REVOKE`.
        public static let revoke = Event(rawValue: 0x40)
        /// Every event.
        public static let all: Event = [.delete, .write, .extend, .attrib, .link, .rename, .revoke]

        public var description: String {
            let names: [(Event, String)] = [(.delete, "delete"), (.write, "write"), (.extend, "extend"),
                                            (.attrib, "attrib"), (.link, "link"), (.rename, "rename"),
                                            (.revoke, "revoke")]
            return "[" + names.filter { contains($0.0) }.map(\.1).joined(separator: ", ") + "]"
        }
    }

    private let fd: Int32
    private let wanted: Event
    private let engine: IOEngine
    /// The size and link count last seen (for `.extend` and `.link`).
    private let tracked = Locked(Tracked(size: 0, links: 0))

    /// The size and link count last seen.
    struct Tracked: Equatable {
        var size: Int64
        var links: Int
    }

    /// The events one inotify event stands for. `status` is the file's size
    /// and link count read when the engine read the event (nil when not
    /// read), which may be after later changes; `tracked` is what the
    /// source saw before.
    static func classify(_ mask: UInt32, status: (size: Int64, links: Int)?, tracked: inout Tracked) -> Event {
        var event: Event = []
        let m = Int32(bitPattern: mask)
        if m & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) != 0 { event.insert(.write) }
        if m & IN_MOVE_SELF != 0 { event.insert(.rename) }
        if m & IN_DELETE_SELF != 0 { event.insert(.delete) }
        if m & IN_UNMOUNT != 0 { event.insert(.revoke) }
        if m & (IN_MODIFY | IN_ATTRIB) != 0, let status {
            // Each kind of event compares, and moves on, only its own
            // number: a write's event read after an unlink must not take
            // the new link count (the unlink's own IN_ATTRIB would then see
            // no change, and the delete would be lost), nor a metadata
            // event read after an append take the new size (the append's
            // IN_MODIFY would see no growth).
            if m & IN_MODIFY != 0 {
                event.insert(.write)
                if status.size > tracked.size { event.insert(.extend) }
                tracked.size = status.size
            }
            if m & IN_ATTRIB != 0 {
                if status.links != tracked.links {
                    event.insert(.link)
                    if status.links == 0 { event.insert(.delete) }
                } else {
                    event.insert(.attrib)
                }
                tracked.links = status.links
            }
        } else if m & IN_MODIFY != 0 {
            event.insert(.write)
        } else if m & IN_ATTRIB != 0 {
            event.insert(.attrib)
        }
        return event
    }

    private let wd = Locked<Int32>(-1)

    /// Creates an inactive source on `fileDescriptor` (which stays the
    /// caller's: close it in the cancel handler).
    ///
    /// - Parameters:
    ///   - fileDescriptor: an open file or directory (`O_PATH` will do).
    ///   - events: what to report.
    ///   - queue: where the handlers run.
    ///   - engine: whose thread reads the inotify fd.
    public init(fileDescriptor: FileDescriptor, events: Event, queue: IOQueue, engine: IOEngine = .shared) {
        self.fd = fileDescriptor.rawValue
        self.wanted = events
        self.engine = engine
        super.init(queue: queue, merge: .or)
    }

    /// The events of this delivery: `Event(rawValue: data)`.
    public var eventsSinceLastDelivery: Event { Event(rawValue: data) }

    override func register() -> Errno? {
        let status: Stat
        do throws(Errno) {
            status = try Syscall.fstat(fd)
        } catch {
            return error
        }
        tracked.withLock { $0 = Tracked(size: status.size, links: status.linkCount) }
        switch InotifyHub.of(engine).add(self, fileFD: fd) {
        case .failure(let error): return error
        case .success(let w):
            wd.withLock { $0 = w }
            return nil
        }
    }

    override func unregister() {
        let w = wd.withLock { w -> Int32 in
            defer { w = -1 }
            return w
        }
        if w >= 0 { InotifyHub.of(engine).remove(self, wd: w) }
    }

    /// The engine's thread: one inotify event of this file.
    func inotifyEvent(_ mask: UInt32) {
        let m = Int32(bitPattern: mask)
        var status: (size: Int64, links: Int)?
        if m & (IN_MODIFY | IN_ATTRIB) != 0, let s = try? Syscall.fstat(fd) { status = (s.size, s.linkCount) }
        let event = tracked.withLock { Self.classify(mask, status: status, tracked: &$0) }
        let reported = event.intersection(wanted)
        if !reported.isEmpty { mergeEvent(reported.rawValue) }
    }
}
