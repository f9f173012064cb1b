#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import RingIOBase
import SystemPackage

/// Memory that requests point at (NUL-terminated paths, a statx buffer, a
/// data buffer), freed when the last request holding it completes.
// @unchecked: everything is written in init, before any request that points
// at it is submitted; the kernel (or a pool worker) writes `statx` and
// `buffer` only while a request runs, and they are read only after its
// completion, which the engine orders after the write.
package final class RequestMemory: @unchecked Sendable {
    package let paths: [UnsafeMutablePointer<CChar>]
    package let statx: UnsafeMutablePointer<cliburing_statx_t>?
    package let buffer: UnsafeMutableRawBufferPointer?
    /// Other memory the same requests point into, kept alive with this.
    package let other: RequestMemory?

    /// Paths are kept as the kernel has them (a name need not be UTF-8).
    package init(paths: [FilePath], statx: Bool = false, bufferSize: Int? = nil, keeping other: RequestMemory? = nil) {
        self.other = other
        self.paths = paths.map { path in
            path.withPlatformString { source in
                let count = strlen(source) + 1
                let pointer = UnsafeMutablePointer<CChar>.allocate(capacity: count)
                pointer.initialize(from: source, count: count)
                return pointer
            }
        }
        // Two: a copy stats its source and its destination in one batch.
        self.statx = statx ? .allocate(capacity: 2) : nil
        self.buffer = bufferSize.map { .allocate(byteCount: Swift.max($0, 1), alignment: 4096) }
    }

    deinit {
        for p in paths { p.deallocate() }
        statx?.deallocate()
        buffer?.deallocate()
    }

    /// Submits one request that points into this memory and awaits its result.
    package func perform(engine: IOEngine, _ operation: IORequest.Operation, mayBlock: Bool = false) async -> Int32 {
        await withUnsafeContinuation { continuation in
            engine.submit(IORequest(operation, owner: self, mayBlock: mayBlock) { res in continuation.resume(returning: res) })
        }
    }

    /// Submits `operations` (as one linked chain when `linked`); `completion`
    /// gets every result, on the engine's thread, once the last is in.
    package func submit(engine: IOEngine, _ operations: [IORequest.Operation], linked: Bool, mayBlock: Bool = false,
                _ completion: @escaping @Sendable ([Int32]) -> Void) {
        let gather = Gather(count: operations.count, completion)
        let requests = operations.enumerated().map { i, operation in
            IORequest(operation, owner: self, mayBlock: mayBlock) { res in gather.set(i, res) }
        }
        if linked { engine.submit(linked: requests) } else { engine.submit(contentsOf: requests) }
    }
}

/// Collects the results of several requests; calls back once all are in.
private final class Gather: Sendable {
    private let state: Locked<(results: [Int32], left: Int)>
    private let completion: @Sendable ([Int32]) -> Void

    init(count: Int, _ completion: @escaping @Sendable ([Int32]) -> Void) {
        state = Locked((results: [Int32](repeating: 0, count: count), left: count))
        self.completion = completion
    }

    func set(_ index: Int, _ res: Int32) {
        let finished = state.withLock { s -> [Int32]? in
            s.results[index] = res
            s.left -= 1
            return s.left == 0 ? s.results : nil
        }
        if let finished { completion(finished) }
    }
}
