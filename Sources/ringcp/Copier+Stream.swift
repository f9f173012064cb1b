#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import Synchronization
import SystemPackage

extension Copier {
    /// A FIFO, a device or a socket on either side: the bytes as they come,
    /// read and written in turn, straight into the destination, as cp does.
    /// Never through a temporary file (a FIFO replaced by a regular file
    /// would leave its reader with nothing; a device cannot be renamed onto),
    /// never by the size a stat gave (a FIFO has none), and each byte once.
    ///
    /// - Parameter holes: `--sparse=always`: blocks of zeros become holes
    ///   (skipped, the size set at the end), as cp makes them.
    func copyStream(_ source: FilePath, _ plan: Plan, holes: Bool = false) async -> Bool {
        let (input, openError) = Blocking.call { FS.open(source, O_RDONLY | O_CLOEXEC | O_NOCTTY) }
        if input < 0 {
            report("cannot open '\(source)' for reading: \(describe(openError))")
            return false
        }
        defer { close(input) }
        let created = plan.existing == nil
        // An existing regular file is truncated and written in place; a FIFO
        // or a device is only opened (a FIFO's open waits for its reader).
        let flags = O_WRONLY | O_CLOEXEC | O_NOCTTY
            | (created ? O_CREAT | O_EXCL : plan.existing?.kind == .regular ? O_TRUNC : 0)
        let (output, createError) = Blocking.call { FS.open(plan.destination, flags, plan.creationMode) }
        if output < 0 {
            reportError("cannot create regular file", plan.shownDestination, createError)
            return false
        }
        var closed = false
        defer { if !closed { close(output) } }
        func abandon(_ error: Errno, reading: Bool) -> Bool {
            if created {
                close(output)
                closed = true
                _ = FS.unlink(plan.destination)
            }
            if reading {
                reportError("error reading", source, error)
            } else {
                reportError("error writing", plan.shownDestination, error)
            }
            return false
        }
        let size = 128 << 10
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        defer { buffer.deallocate() }
        var offset = 0
        let block = 4096
        while true {
            if Task.isCancelled { return abandon(.canceled, reading: true) }
            let (n, readError) = Blocking.call { Int32(clamping: read(input, buffer, size)) }
            if n < 0 {
                if readError == .interrupted { continue }
                return abandon(readError, reading: true)
            }
            if n == 0 { break }
            var done = 0
            while done < Int(n) {
                let length = holes ? min(block, Int(n) - done) : Int(n) - done
                if holes && UnsafeRawBufferPointer(start: buffer + done, count: length).allSatisfy({ $0 == 0 }) {
                    done += length  // a hole: nothing written
                    continue
                }
                let at = off_t(offset + done)
                let (written, writeError) = Blocking.call {
                    Int32(clamping: holes ? pwrite(output, buffer + done, length, at) : write(output, buffer + done, length))
                }
                if written < 0 && writeError == .interrupted { continue }
                if written <= 0 { return abandon(written < 0 ? writeError : .noSpace, reading: false) }
                done += Int(written)
            }
            offset += Int(n)
            progress?.add(Int(n))
        }
        if holes && ftruncate(output, off_t(offset)) != 0 { return abandon(Errno(rawValue: errno), reading: false) }
        closed = true
        if close(output) != 0 { return abandon(Errno(rawValue: errno), reading: false) }
        if created && !settings.preserve.contains(.mode) && (plan.mode & ~umask) != plan.mode { _ = FS.chmod(plan.destination, plan.mode) }
        return true
    }
}

/// System calls that may wait without end (opening a FIFO that has no reader
/// or writer, reading one that stays silent): a signal cannot cancel them as
/// it cancels the ring's requests. While one runs, a signal ends ringcp as it
/// ends cp (`RingCP`'s handler looks at `Blocking.stuckMark`).
enum Blocking {
    /// Calls running now, and calls started so far.
    private static let state = Mutex((running: 0, started: UInt64(0)))

    /// While a call runs: how many had started by then (the same number
    /// later, with a call still running, means no call has returned since).
    static var stuckMark: UInt64? { state.withLock { $0.running > 0 ? $0.started : nil } }

    /// Runs `call` counted, and returns its result with the errno it left.
    static func call(_ call: () -> Int32) -> (Int32, Errno) {
        state.withLock {
            $0.running += 1
            $0.started += 1
        }
        let result = call()
        let error = Errno(rawValue: errno)
        state.withLock { $0.running -= 1 }
        return (result, error)
    }
}
