#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine

/// An engine's file-system sources: one inotify fd (a `SourceHub`), read
/// by the engine's thread when the ring (or the readiness loop) reports it
/// readable; one watch per watched file, shared by the sources of that file.
final class InotifyHub: Sendable {
    private let hub: SourceHub<IOFileSystemSource>

    /// Every event a source can report, for every watch.
    static let mask = UInt32(IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF | IN_CREATE | IN_DELETE
                             | IN_MOVED_FROM | IN_MOVED_TO | IN_UNMOUNT)

    init(engine: IOEngine) {
        hub = SourceHub(engine: engine, makeFD: { () throws(Errno) in try Syscall.inotifyInit() },
                        bufferSize: 16 * 1024, parse: Self.parse,
                        deliver: { source, mask in source.inotifyEvent(mask) })
    }

    static func of(_ engine: IOEngine) -> InotifyHub {
        engine.attachment(InotifyHub.self) { InotifyHub(engine: engine) }
    }

    /// The events of a buffer read from the inotify fd. An `IN_IGNORED`
    /// ends its watch: the kernel dropped it (the file is gone, or its file
    /// system was unmounted) and it never reports again.
    private static func parse(_ buffer: UnsafeRawBufferPointer, _ events: inout [SourceHub<IOFileSystemSource>.Event]) {
        var at = 0
        while at + MemoryLayout<inotify_event>.size <= buffer.count {
            let event = buffer.loadUnaligned(fromByteOffset: at, as: inotify_event.self)
            events.append(.init(key: event.wd, value: event.mask, lastForKey: event.mask & UInt32(IN_IGNORED) != 0))
            at += MemoryLayout<inotify_event>.size + Int(event.len)
        }
    }

    /// Watches `fileFD` for `source`; the watch descriptor.
    func add(_ source: IOFileSystemSource, fileFD: Int32) -> Result<Int32, Errno> {
        hub.add(source) { (inotify) throws(Errno) in try Syscall.inotifyAddWatch(inotify, fd: fileFD, mask: Self.mask) }
    }

    func remove(_ source: IOFileSystemSource, wd: Int32) {
        hub.remove(source, key: wd) { inotify in Syscall.inotifyRemoveWatch(inotify, wd) }
    }
}
