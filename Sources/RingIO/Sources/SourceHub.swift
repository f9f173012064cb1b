#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
@_spi(Engine) import RingIOEngine

/// One fd of an engine (its signalfd, its inotify fd) that the engine's
/// thread reads whenever the ring (or the readiness loop) reports it
/// readable, and the sources it feeds, by key (a signal number, a watch
/// descriptor). The signal and file-system hubs are each one of these.
///
/// ```
///  add(source, key) ──▶ fd (made by the first add) ──▶ FDWatch (multishot poll)
///                                                          │ readable
///  source.deliver(value) ◀── sources[key] ◀── parse ◀── read until EAGAIN
/// ```
///
/// - The fd is made by the first `add` and closed when the last source is
///   removed (or with the hub, when its engine goes); its watch is armed as
///   soon as the fd exists, whether or not that first `add` succeeded.
/// - Sources are held weakly: an active source is kept alive by itself.
/// - The fd is read with the lock held (it is non-blocking), so no `remove`
///   closes it under a read.
final class SourceHub<Source: AnyObject & Sendable>: @unchecked Sendable {
    // @unchecked: `fd`, `watch` and `sources` are touched only with `lock`
    // held; the rest is immutable. The closures given to `add` and
    // `remove` run under `lock` too, so the hubs keep their own state
    // (signal masks, saved actions) under it.

    /// One record read from the fd: the key of the sources it goes to, the
    /// value handed to each, and whether the key reports nothing more
    /// (inotify's `IN_IGNORED`).
    struct Event {
        var key: Int32
        var value: UInt32
        var lastForKey = false
    }

    private struct Weak { weak var source: Source? }

    private let lock = PlainLock()
    private unowned(unsafe) let engine: IOEngine
    // `unowned(unsafe)`: the engine holds the hub (an attachment) for its
    // whole life; the hub is used only by sources, which hold the engine.
    private let makeFD: () throws(Errno) -> Int32
    private let bufferSize: Int
    private let parse: (UnsafeRawBufferPointer, inout [Event]) -> Void
    private let deliver: (Source, UInt32) -> Void
    private var fd: Int32 = -1
    private var watch: FDWatch?
    private var sources: [Int32: [ObjectIdentifier: Weak]] = [:]

    /// - Parameters:
    ///   - makeFD: makes the fd (non-blocking), on the first `add`.
    ///   - bufferSize: the bytes read at a time (whole records fit).
    ///   - parse: appends the events of the records in a buffer read.
    ///   - deliver: hands one event's value to one of its sources (on the
    ///     engine's thread, outside the lock).
    init(engine: IOEngine, makeFD: @escaping () throws(Errno) -> Int32, bufferSize: Int,
         parse: @escaping (UnsafeRawBufferPointer, inout [Event]) -> Void,
         deliver: @escaping (Source, UInt32) -> Void) {
        self.engine = engine
        self.makeFD = makeFD
        self.bufferSize = bufferSize
        self.parse = parse
        self.deliver = deliver
    }

    deinit {
        watch?.stop()
        if fd >= 0 { Syscall.closeIgnoringErrors(fd) }
    }

    /// Adds `source` under the key `register` gives; `register` runs under
    /// the lock with the hub's fd and may throw (the source is then not
    /// added; the fd and its watch stay for the other sources).
    func add(_ source: Source, register: (Int32) throws(Errno) -> Int32) -> Result<Int32, Errno> {
        var started: FDWatch?
        let result = lock.withLock { () -> Result<Int32, Errno> in
            do throws(Errno) {
                if fd < 0 {
                    fd = try makeFD()
                    let w = FDWatch(engine: engine, fd: fd, events: Int16(POLLIN), rearmAtOnce: true,
                                    onReady: { [weak self] _ in self?.drain() })
                    watch = w
                    started = w
                }
                let key = try register(fd)
                sources[key, default: [:]][ObjectIdentifier(source)] = Weak(source: source)
                return .success(key)
            } catch {
                return .failure(error)
            }
        }
        started?.rearmIfEnded()
        return result
    }

    /// Runs `body` under the hub's lock; `hasKey` says whether a key has sources.
    func withLock<R>(_ body: (_ hasKey: (Int32) -> Bool) -> R) -> R {
        lock.withLock { body { sources[$0] != nil } }
    }

    /// Removes `source` from `key`; `lastOfKey` runs (under the lock, with
    /// the fd) when no source of `key` is left. The last source of all
    /// closes the fd (a later `add` makes a new one).
    func remove(_ source: Source, key: Int32, lastOfKey: (Int32) -> Void) {
        let stopped = lock.withLock { () -> FDWatch? in
            if sources[key]?.removeValue(forKey: ObjectIdentifier(source)) != nil, sources[key]!.isEmpty {
                sources[key] = nil
                if fd >= 0 { lastOfKey(fd) }
            }
            guard sources.isEmpty, fd >= 0 else { return nil }
            // The ring holds its own reference to the file until the
            // watch's cancel completes; the number may be reused at once.
            Syscall.closeIgnoringErrors(fd)
            fd = -1
            defer { watch = nil }
            return watch
        }
        stopped?.stop()
    }

    /// The engine's thread: reads every pending record and hands each
    /// event to the sources of its key.
    private func drain() {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferSize, alignment: 8)
        defer { buffer.deallocate() }
        let targets = lock.withLock { () -> [(Source, UInt32)] in
            guard fd >= 0 else { return [] }
            var events: [Event] = []
            while let n = try? Syscall.read(fd, into: buffer), n > 0 {
                parse(UnsafeRawBufferPointer(rebasing: buffer[0..<n]), &events)
            }
            var out: [(Source, UInt32)] = []
            for event in events {
                for w in (sources[event.key] ?? [:]).values { if let s = w.source { out.append((s, event.value)) } }
                if event.lastForKey { sources[event.key] = nil }
            }
            return out
        }
        for (source, value) in targets { deliver(source, value) }
    }
}
