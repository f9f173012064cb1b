#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
@_spi(Engine) import RingIOEngine
import RingIOBase
import RingIOData
import RingIOQueue
import RingIOChannel

/// The engine's path of `IO.copyFile`, for what the pool worker's path
/// (SmallFileCopy+Blocking.swift) leaves to it, a FIFO or a device on
/// either side: the stat and both opens in one batch (a FIFO's open waits
/// on io-wq, not on a pool worker), then, for a small regular file, one
/// linked chain that reads it whole, writes it, closes both and renames the
/// new file into place. Each step is submitted from the previous one's
/// completion, on the engine's thread; the caller hears once, at the end.
struct SmallFileCopy: Sendable {
    enum Outcome: Sendable {
        case copied(Int64)
        case failed(IOError)
        /// Not a small regular file: both are open, for the general path.
        case notSmall(PathRequest.Pair)
        /// A short read (the source shrank since its stat) or a short write
        /// (the disk filled): both files are closed, nothing is left behind
        /// (when the copy created its file), and the caller copies again by
        /// the general path.
        case changed
    }

    let paths: PathRequest.Paths
    let permissions: FilePermissions?
    let createNew: Bool
    let noReplace: Bool
    /// The chain may copy the file (else both files are opened only, for
    /// another strategy).
    var chain = true
    /// The new file is flushed (`fsync`) before it is closed and renamed.
    var sync = false
    /// The target is opened for reading and writing (direct I/O merges a partial last block).
    var readable = false
    let engine: IOEngine
    let completion: @Sendable (Outcome) -> Void

    func start() {
        PathRequest.openPair(engine: engine, paths, permissions: permissions, createNew: createNew,
                             readable: readable) { result in
            switch result {
            case .failure(let error):
                completion(.failed(error))
            case .success(let pair):
                // A FIFO or a device at the destination is never renamed over: written in place, by the caller.
                if !chain || (pair.destinationKind.map { $0 != .regular } ?? false) {
                    completion(.notSmall(pair))
                } else if pair.info.kind == .regular && pair.info.size == 0 {
                    probe(pair.input, pair.output)
                } else if pair.info.kind == .regular && pair.info.size <= Int64(IO.smallFileLimit) {
                    copy(pair.input, pair.output, size: Int(pair.info.size))
                } else {
                    completion(.notSmall(pair))
                }
            }
        }
    }

    /// A file whose stat says 0 bytes may still have some (procfs does
    /// that): one read of up to `smallFileLimit` finds out; the rest as for
    /// any small file, or the general path if the read fills the buffer.
    private func probe(_ input: Int32, _ output: Int32) {
        let memory = RequestMemory(paths: [], bufferSize: IO.smallFileLimit)
        memory.submit(engine: engine, [.read(fd: input, buffer: memory.buffer!, offset: 0)],
                      linked: false, mayBlock: true) { [self] results in
            let n = results[0]
            if n >= 0 && n < IO.smallFileLimit { return copy(input, output, size: Int(n), readFrom: memory) }
            PathRequest.cleanUp([input, output], removing: createNew ? paths.target : nil) { [completion, paths] in
                completion(n < 0 ? .failed(IOError(.read, path: paths.source, side: .source, errno: Errno(rawValue: -n)))
                           : .changed)
            }
        }
    }

    /// - Parameter readFrom: the bytes, already read (by `probe`); nil: the chain reads them.
    private func copy(_ input: Int32, _ output: Int32, size: Int, readFrom: RequestMemory? = nil) {
        let memory = RequestMemory(paths: [paths.target] + (paths.destination.map { [$0] } ?? []),
                                   bufferSize: readFrom == nil ? size : nil, keeping: readFrom)
        let buffer = readFrom?.buffer ?? memory.buffer!
        var chain: [IORequest.Operation] = []
        if readFrom == nil {
            chain.append(.read(fd: input, buffer: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<size]), offset: 0))
        }
        chain.append(.write(fd: output, buffer: UnsafeRawBufferPointer(rebasing: buffer[0..<size]), offset: 0))
        if sync { chain.append(.fsync(fd: output, dataOnly: false)) }
        chain += [.close(fd: input), .close(fd: output)]
        if paths.destination != nil {
            chain.append(.renameat(oldDirectory: AT_FDCWD, oldPath: memory.paths[0], newDirectory: AT_FDCWD,
                                   newPath: memory.paths[1], flags: noReplace ? UInt32(RENAME_NOREPLACE) : 0))
        }
        memory.submit(engine: engine, chain, linked: true) { [paths, createNew, sync, completion] chainResults in
            // As if the read were part of the chain, and without the fsync (its failure is the write's).
            var results = readFrom == nil ? chainResults : [Int32(size)] + chainResults
            if sync {
                let flushed = results.remove(at: 2)
                if flushed < 0 && flushed != -ECANCELED && results[1] == size { results[1] = flushed }
            }
            if results.allSatisfy({ $0 >= 0 }) && results[0] == size && results[1] == size {
                return completion(.copied(Int64(size)))
            }
            // The chain broke: what was cancelled did not run.
            let open = [(results[2], input), (results[3], output)].filter { $0.0 == -ECANCELED }.map(\.1)
            let short = (results[0] >= 0 && results[0] < size) || (results[1] >= 0 && results[1] < size)
            // read, write, close, close, rename: which step failed says which side.
            let index = results.firstIndex { $0 < 0 && $0 != -ECANCELED }
            let errno = Errno(rawValue: index.map { -results[$0] } ?? EIO)
            let (source, destination) = (paths.source, paths.shownDestination)
            let failure = switch index {
            case 0: IOError(.read, path: source, side: .source, errno: errno)
            case 2: IOError(.close, path: source, side: .source, errno: errno)
            case 3: IOError(.close, path: destination, side: .destination, errno: errno)
            case 4: IOError(.rename, path: destination, side: .destination, errno: errno)
            default: IOError(.write, path: destination, side: .destination, errno: errno)
            }
            PathRequest.cleanUp(open, removing: createNew ? paths.target : nil) {
                completion(short ? .changed : .failed(failure))
            }
        }
    }
}
