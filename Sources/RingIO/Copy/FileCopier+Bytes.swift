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
        let paths = PathRequest.Paths(source: sourcePath ?? "", inPlace: destinationPath ?? "")
        let (bytes, how) = try await transfer(source.rawValue, destination.rawValue, CopyFileInfo(info), paths,
                                              namesPaths: (sourcePath != nil, destinationPath != nil))
        return Outcome(bytes: bytes, strategy: how, replace: .inPlace)
    }

    /// The bytes from `input` to `output`: the plan's steps for these
    /// files (`CopyPlan`), tried in order until one copies them. Closes neither.
    func transfer(_ input: Int32, _ output: Int32, _ info: CopyFileInfo, _ paths: PathRequest.Paths,
                  namesPaths: (Bool, Bool) = (true, true)) async throws(IOError) -> (Int64, Strategy) {
        let (source, destination) = (namesPaths.0 ? paths.source : nil, namesPaths.1 ? paths.shownDestination : nil)
        let readError = { (errno: Errno) in IOError(.read, path: source, side: .source, errno: errno) }
        let writeError = { (errno: Errno) in IOError(.write, path: destination, side: .destination, errno: errno) }
        /// A step's error (no path: its files are descriptors), named.
        let named = { (error: IOError) -> IOError in
            switch error.side {
            case .destination: writeError(error.errno)
            case .source: readError(error.errno)
            case nil: IOError(.copy, path: destination, side: .destination, errno: error.errno)
            }
        }
        let out: Stat
        do throws(Errno) { out = try Syscall.fstat(output) } catch {
            throw IOError(.stat, path: destination, side: .destination, errno: error)
        }
        let plan = CopyPlan(source: info.kind, destination: out.type,
                            fileSystem: info.kind == .regular && out.type == .regular && IO.preallocationHelps(output) ? .ext4 : .other,
                            size: info.size, request: request)
        let size = info.size
        // Counted per step: a step that moved nothing may give way to the next.
        let moved = Locked<Int64>(0)
        let userProgress = self.progress ?? { _ in }
        let progress: @Sendable (Int) -> Void = { n in
            moved.withLock { $0 += Int64(n) }
            userProgress(n)
        }
        var regions: [Range<Int64>]?
        for step in plan.steps {
            if regions == nil && step != .stream && step != .reflink {
                // The size first: holes stay holes, and the file system sees the whole extent at once.
                do throws(Errno) { try Syscall.ftruncate(output, to: size) } catch { throw writeError(error) }
                let mayBeSparse = (try? Syscall.fstat(input)).map { $0.blocksAllocated * 512 < size } ?? false
                regions = sparse == .never ? (size > 0 ? [0..<size] : [])
                    : dataRegions(of: FileDescriptor(rawValue: input), size: size, mayBeSparse: mayBeSparse)
                // ext4 copies by splicing: the data's blocks allocated in one
                // call first, not block by block as the writes come (see `IO.preallocate`).
                if plan.preallocate { IO.preallocate(output, regions!) }
            }
            moved.withLock { $0 = 0 }
            let endedAt: Int64?
            do throws(IOError) {
                endedAt = try await run(step, input, output, size: size, regions: regions ?? [], progress: progress)
            } catch where plan.fallsThrough(from: step, errno: error.errno, moved: moved.withLock { $0 }) {
                continue
            } catch {
                throw named(error)
            }
            if let end = endedAt {
                do throws(Errno) { try Syscall.ftruncate(output, to: end) } catch { throw writeError(error) }
            }
            try await flush(output, writeError)
            return (endedAt ?? (step == .stream ? moved.withLock { $0 } : size), step.strategy)
        }
        // Only a step that cannot be the last falls through: the plan's last one throws.
        throw IOError(.copy, path: destination, side: .destination, errno: .notSupported)
    }

    /// Runs one step of the plan on the open files. Throws its error with
    /// the side (no path) for the loop to name, but `.stream`'s, named.
    /// - Returns: where the source ended, if it ended early (it shrank under the copy).
    private func run(_ step: CopyPlan.Step, _ input: Int32, _ output: Int32, size: Int64, regions: [Range<Int64>],
                     progress: @escaping @Sendable (Int) -> Void) async throws(IOError) -> Int64? {
        let (from, to) = (FileDescriptor(rawValue: input), FileDescriptor(rawValue: output))
        switch step {
        case .wholeFile:
            // Taken before the files are open (SmallFileCopy.swift); a plan
            // made for open files never holds it for a regular file above the limit.
            throw IOError(.copy, path: nil, errno: .invalidArgument)
        case .stream:
            // The bytes are what the progress counted (the loop's `moved`).
            _ = try await stream(input, output, readError: { IOError(.read, path: nil, side: .source, errno: $0) },
                                 writeError: { IOError(.write, path: nil, side: .destination, errno: $0) },
                                 progress: progress)
            return nil
        case .reflink:
            let error = await Self.offThread { () -> Errno? in
                do throws(Errno) { try Syscall.ficlone(output, from: input) } catch { return error }
                return nil
            }
            if let error { throw IOError(.copy, path: nil, errno: error) }
            progress(Int(size))
            return nil
        case .preallocatedSplice:
            // ext4's copy_file_range splices through a 64 KiB pipe; this, through 1 MiB.
            return try await IO.spliceFileRanges(regions, from: from, to: to, progress: progress)
        case .copyFileRange:
            // One call at a time, as cp (more lanes only queue on the
            // destination's inode lock); 64 MiB each, for the progress.
            return try await IO.copyFileRange(regions, from: from, to: to, chunk: 64 << 20, lanes: 1, progress: progress)
        case .ringSplice:
            // 4 lanes of 1 MiB pipes: measured best here (2 or 8 lanes no better; 4 MiB pipes 2× slower).
            return try await IO.copyRanges(regions, from: from, to: to, engine: engine, progress: progress)
        case .channels:
            // A random channel's offsets count from the fd's position when it
            // is made (as in dispatch I/O); SEEK_DATA/SEEK_HOLE moved it.
            _ = try? Syscall.lseek(input, 0, SEEK_SET)
            _ = try? Syscall.lseek(output, 0, SEEK_SET)
            let copy = ChannelRangeCopy(source: from, destination: to, regions: regions, direct: directIO,
                                        holes: sparse == .always, engine: engine, progress: progress)
            try await copy.run()
            return copy.endedAt
        }
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
                writeError: (Errno) -> IOError,
                progress: @escaping @Sendable (Int) -> Void) async throws(IOError) -> Int64 {
        let closed = IOGroup()
        closed.enter()
        closed.enter()
        let writer = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: output), queue: .global,
                               engine: engine) { _ in closed.leave() }
        let reader = IOChannel(kind: .stream, fileDescriptor: FileDescriptor(rawValue: input), queue: .global,
                               engine: engine) { _ in closed.leave() }
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
                    if error == nil { progress(count) }
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
