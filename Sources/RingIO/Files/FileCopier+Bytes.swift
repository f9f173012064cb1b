#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOChannel
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue

extension FileCopier {
    /// Copies the bytes of one open file into another, in place: what
    /// `copy(from:to:)` does once both are open, by the same strategies
    /// (`.stream` when either is not a regular file). Neither descriptor is
    /// closed. For a regular source, the destination is sized to the source
    /// first and its bytes written at their own offsets (both descriptors'
    /// positions are then unspecified); a FIFO or a device is read and
    /// written from its current position to its end.
    ///
    /// The paths, if given, name the files in errors.
    ///
    /// - Throws: an `IOError` with the side, as `copy(from:to:)`.
    @discardableResult
    public func copy(from source: FileDescriptor, to destination: FileDescriptor, sourcePath: FilePath? = nil,
                     destinationPath: FilePath? = nil) async throws(IOError) -> Outcome {
        let info: Stat
        do throws(Errno) { info = try Syscall.fstat(source.rawValue) } catch {
            throw IOError(.stat, path: sourcePath, side: .source, errno: error)
        }
        if info.type == .directory {
            throw IOError(.read, path: sourcePath, side: .source, errno: .isDirectory)
        }
        let paths = PathRequest.Paths(source: sourcePath ?? "", target: destinationPath ?? "", destination: nil)
        let (bytes, how) = try await transfer(source.rawValue, destination.rawValue, CopyFileInfo(info), paths,
                                              namesPaths: (sourcePath != nil, destinationPath != nil))
        return Outcome(bytes: bytes, strategy: how, replace: .inPlace)
    }

    /// The bytes from `input` to `output`, by the strategy the files allow.
    /// Closes neither.
    func transfer(_ input: Int32, _ output: Int32, _ info: CopyFileInfo, _ paths: PathRequest.Paths,
                  namesPaths: (Bool, Bool) = (true, true)) async throws(IOError) -> (Int64, Strategy) {
        let (source, destination) = (namesPaths.0 ? paths.source : nil, namesPaths.1 ? paths.shownDestination : nil)
        let readError = { (errno: Errno) in IOError(.read, path: source, side: .source, errno: errno) }
        let writeError = { (errno: Errno) in IOError(.write, path: destination, side: .destination, errno: errno) }
        let progress = self.progress ?? { _ in }
        let out: Stat
        do throws(Errno) { out = try Syscall.fstat(output) } catch {
            throw IOError(.stat, path: destination, side: .destination, errno: error)
        }
        if info.kind != .regular || out.type != .regular {
            let bytes = try await stream(input, output, readError: readError, writeError: writeError)
            return (bytes, .stream)
        }
        let size = info.size
        if reflink != .never || strategy == .reflink {
            let error = await Self.offThread { () -> Errno? in
                do throws(Errno) { try Syscall.ficlone(output, from: input) } catch { return error }
                return nil
            }
            if error == nil {
                progress(Int(size))
                try await flush(output, writeError)
                return (size, .reflink)
            }
            if reflink == .always {
                throw IOError(.copy, path: destination, side: .destination, errno: error!)
            }
        }
        // The size first: holes stay holes, and the file system sees the whole extent at once.
        do throws(Errno) { try Syscall.ftruncate(output, to: size) } catch { throw writeError(error) }
        let mayBeSparse = (try? Syscall.fstat(input)).map { $0.blocksAllocated * 512 < size } ?? false
        let regions = sparse == .never ? (size > 0 ? [0..<size] : [])
            : dataRegions(of: FileDescriptor(rawValue: input), size: size, mayBeSparse: mayBeSparse)
        var how: Strategy = directIO || sparse == .always ? .channels
            : [.splice, .channels].contains(strategy) ? strategy : .copyFileRange
        var endedAt: Int64?
        var copied = false
        if how == .copyFileRange && IO.preallocationHelps(output) {
            // ext4 copies by splicing: the data's blocks allocated in one
            // call first, not block by block as the writes come (see `IO.preallocationHelps`).
            IO.preallocate(output, regions)
            if strategy == .automatic {
                do throws(IOError) {
                    // ext4's copy_file_range splices through a 64 KiB pipe; this, through 1 MiB.
                    endedAt = try await IO.spliceFileRanges(regions, from: FileDescriptor(rawValue: input),
                                                            to: FileDescriptor(rawValue: output), progress: progress)
                    (how, copied) = (.splice, true)
                } catch where error.operation == .copy {
                    // Nothing copied: copy_file_range, and its fallbacks, next.
                } catch {
                    throw error.side == .destination ? writeError(error.errno) : readError(error.errno)
                }
            }
        }
        if how == .copyFileRange && !copied {
            do throws(IOError) {
                // One call at a time, as cp (more lanes only queue on the
                // destination's inode lock); 64 MiB each, for the progress.
                endedAt = try await IO.copyFileRange(regions, from: FileDescriptor(rawValue: input),
                                                     to: FileDescriptor(rawValue: output), chunk: 64 << 20, lanes: 1,
                                                     progress: progress)
            } catch where error.operation == .copy {
                how = .splice  // file systems that cannot: spliced through pipes, or else the channels
            } catch {
                throw error.side == .destination ? writeError(error.errno) : readError(error.errno)
            }
        }
        if how == .splice && !copied {
            let moved = Locked(0)
            do throws(IOError) {
                // 4 lanes of 1 MiB pipes: measured best here (2 or 8 lanes no better; 4 MiB pipes 2× slower).
                endedAt = try await IO.copyRanges(regions, from: FileDescriptor(rawValue: input),
                                                  to: FileDescriptor(rawValue: output), engine: engine) { n in
                    moved.withLock { $0 += n }
                    progress(n)
                }
            } catch where moved.withLock({ $0 }) == 0
                            && [.invalidArgument, .notSupported, .noFunction].contains(error.errno) {
                how = .channels  // a file system that cannot splice: the channels can
            } catch where error.side == nil {
                throw IOError(.copy, path: destination, side: .destination, errno: error.errno)
            } catch {
                throw error.side == .destination ? writeError(error.errno) : readError(error.errno)
            }
        }
        if how == .channels {
            // A random channel's offsets count from the fd's position when it
            // is made (as in dispatch I/O); SEEK_DATA/SEEK_HOLE moved it.
            _ = try? Syscall.lseek(input, 0, SEEK_SET)
            _ = try? Syscall.lseek(output, 0, SEEK_SET)
            let copy = ChannelRangeCopy(source: FileDescriptor(rawValue: input), destination: FileDescriptor(rawValue: output),
                                        regions: regions, direct: directIO, holes: sparse == .always, engine: engine,
                                        progress: progress)
            do throws(CopyFailure) {
                try await copy.run()
            } catch {
                throw error.side == .read ? readError(error.errno) : writeError(error.errno)
            }
            endedAt = copy.endedAt
        }
        if let end = endedAt {
            do throws(Errno) { try Syscall.ftruncate(output, to: end) } catch { throw writeError(error) }
        }
        try await flush(output, writeError)
        return (endedAt ?? size, how)
    }

    /// With `sync: .beforeRename`, `fsync` through the engine.
    private func flush(_ output: Int32, _ writeError: (Errno) -> IOError) async throws(IOError) {
        guard sync == .beforeRename else { return }
        let memory = RequestMemory(paths: [])
        let res = await memory.perform(engine: engine, .fsync(fd: output, dataOnly: false), mayBlock: true)
        if res < 0 { throw IOError(.synchronize, path: writeError(.ioError).path, side: .destination, errno: Errno(rawValue: -res)) }
    }

    /// The stream copy (a FIFO, a device or a socket on either side): two
    /// stream channels, two chunks read ahead, up to four writes
    /// outstanding, each byte written once, in order. Returns once both
    /// channels are closed (the descriptors stay open).
    func stream(_ input: Int32, _ output: Int32, readError: (Errno) -> IOError,
                writeError: (Errno) -> IOError) async throws(IOError) -> Int64 {
        let closed = IOGroup()
        closed.enter()
        closed.enter()
        let writer = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: output), queue: .global,
                               engine: engine) { _ in closed.leave() }
        let reader = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: input), queue: .global,
                               engine: engine) { _ in closed.leave() }
        let progress = self.progress
        // Up to four writes outstanding (the writer pipelines them), two
        // chunks read ahead: about 6 MiB in buffers, whatever the file size.
        let window = WriteWindow(limit: 4)
        var total: Int64 = 0
        var failure: IOError?
        var chunks = reader.chunks().makeAsyncIterator()
        while failure == nil {
            let next: DataChunk?
            do throws(Errno) { next = try await chunks.next() } catch {
                failure = readError(error)
                break
            }
            guard let chunk = next else { break }
            do throws(Errno) { try await window.acquire() } catch {
                failure = writeError(error)
                break
            }
            total += Int64(chunk.count)
            let count = chunk.count
            writer.core.submit(direction: .write, offset: 0, length: count, data: chunk, queue: writer.core.queue,
                               options: OperationOptions(inline: true)) { done, _, error in
                if done {
                    if error == nil { progress?(count) }
                    window.release(error)
                }
            }
        }
        await window.drain()
        if failure == nil, let error = window.firstError { failure = writeError(error) }
        reader.close(stop: failure != nil)
        writer.close(stop: failure != nil)
        await closed.wait()
        if let failure { throw failure }
        return total
    }

    /// Runs `work` on `IOQueue.global` (a system call that may wait on the
    /// file system) and returns its result.
    static func offThread<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withUnsafeContinuation { continuation in
            IOQueue.global.async { continuation.resume(returning: work()) }
        }
    }
}

extension CopyFileInfo {
    init(_ status: Stat) {
        kind = status.type
        mode = UInt32(status.mode.rawValue)
        size = status.size
        device = UInt64(status.deviceID.rawValue)
        inode = UInt64(status.inode.rawValue)
    }
}
