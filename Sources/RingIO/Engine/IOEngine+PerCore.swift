#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import RingIOBase

/// Engines per core: more rings, not more hand-offs.
///
/// Each engine owns a ring, a ring thread and a ring queue (``IOEngine/queue``).
/// A program that spreads its channels over ``IOEngine/perCore``, and runs the
/// work of each channel on its engine's queue, keeps every operation on one
/// thread from submission to handler, as a thread-per-core runtime does.
extension IOEngine {
    private static let _perCore: [IOEngine] = {
        let cores = Syscall.onlineProcessors()
        var engines = [IOEngine.shared]
        for _ in 1..<cores {
            // Like `shared`: io_uring where it can, else the thread pool
            // (whose fallback reason `shared` has already reported).
            let engine = (try? IOEngine(configuration: Configuration(backend: IOEngine.shared.backend)))
                ?? IOEngine(threadPoolBecause: "io_uring could not be set up")
            engines.append(engine)
        }
        return engines
    }()

    private static let nextEngine = Atomic<Int>(0)

    /// One engine per online CPU, created on first use; the first is
    /// ``IOEngine/shared``. They use the same backend as `shared`.
    ///
    /// The ring threads are not pinned to CPUs; the scheduler keeps each
    /// near its work.
    public static var perCore: [IOEngine] { _perCore }

    /// The next engine of ``IOEngine/perCore``, round robin: a simple way to
    /// spread channels over the cores.
    ///
    /// ```swift
    /// let engine = IOEngine.next()
    /// let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: engine.queue, engine: engine) { _ in
    ///     try? fd.close()
    /// }
    /// ```
    public static func next() -> IOEngine {
        let engines = _perCore
        let i = nextEngine.wrappingAdd(1, ordering: .relaxed).oldValue
        return engines[(i % engines.count + engines.count) % engines.count]
    }
}
