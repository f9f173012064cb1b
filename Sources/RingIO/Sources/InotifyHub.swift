#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine

/// An engine's file-system sources: one inotify fd, read by the engine's
/// thread when the ring (or the readiness loop) reports it readable; one
/// watch per watched file, shared by the sources of that file.
final class InotifyHub: @unchecked Sendable {
    // @unchecked: every var is touched only with `lock` held.
    private let lock = PlainLock()
    private unowned(unsafe) let engine: IOEngine
    // `unowned(unsafe)`: the engine holds the hub (an attachment) for its
    // whole life; the hub is used only by sources, which hold the engine.
    private var fd: Int32 = -1
    private var watch: FDWatch?
    private var byWatch: [Int32: [ObjectIdentifier: Weak]] = [:]

    private struct Weak { weak var source: IOFileSystemSource? }

    /// Every event a source can report, for every watch.
    static let mask = UInt32(IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF | IN_CREATE | IN_DELETE
                             | IN_MOVED_FROM | IN_MOVED_TO | IN_UNMOUNT)

    init(engine: IOEngine) { self.engine = engine }

    static func of(_ engine: IOEngine) -> InotifyHub {
        engine.attachment(InotifyHub.self) { InotifyHub(engine: engine) }
    }

    /// Watches `fileFD` for `source`; the watch descriptor.
    func add(_ source: IOFileSystemSource, fileFD: Int32) -> Result<Int32, Errno> {
        let result = lock.withLock { () -> Result<(Int32, FDWatch?), Errno> in
            do throws(Errno) {
                var started: FDWatch?
                if fd < 0 {
                    fd = try Syscall.inotifyInit()
                    let w = FDWatch(engine: engine, fd: fd, events: Int16(POLLIN), rearmAtOnce: true,
                                    onReady: { [weak self] _ in self?.drain() })
                    watch = w
                    started = w
                }
                let wd = try Syscall.inotifyAddWatch(fd, fd: fileFD, mask: Self.mask)
                byWatch[wd, default: [:]][ObjectIdentifier(source)] = Weak(source: source)
                return .success((wd, started))
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .failure(let e): return .failure(e)
        case .success(let (wd, started)):
            started?.rearmIfEnded()
            return .success(wd)
        }
    }

    func remove(_ source: IOFileSystemSource, wd: Int32) {
        lock.withLock {
            byWatch[wd]?[ObjectIdentifier(source)] = nil
            if byWatch[wd]?.isEmpty ?? false {
                byWatch[wd] = nil
                if fd >= 0 { Syscall.inotifyRemoveWatch(fd, wd) }
            }
        }
    }

    /// The engine's thread: reads every queued event and hands each to the
    /// sources of its watch.
    private func drain() {
        let fd = lock.withLock { self.fd }
        guard fd >= 0 else { return }
        var events: [(Int32, UInt32)] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 8)
        defer { buffer.deallocate() }
        while let n = try? Syscall.read(fd, into: buffer), n > 0 {
            var at = 0
            while at + MemoryLayout<inotify_event>.size <= n {
                let event = buffer.loadUnaligned(fromByteOffset: at, as: inotify_event.self)
                events.append((event.wd, event.mask))
                at += MemoryLayout<inotify_event>.size + Int(event.len)
            }
        }
        let targets = lock.withLock { () -> [(IOFileSystemSource, UInt32)] in
            var out: [(IOFileSystemSource, UInt32)] = []
            for (wd, mask) in events {
                for w in (byWatch[wd] ?? [:]).values { if let s = w.source { out.append((s, mask)) } }
                // The kernel dropped the watch (the file is gone, or its file
                // system was unmounted): it never reports again.
                if mask & UInt32(IN_IGNORED) != 0 { byWatch[wd] = nil }
            }
            return out
        }
        for (source, mask) in targets { source.inotifyEvent(mask) }
    }
}
