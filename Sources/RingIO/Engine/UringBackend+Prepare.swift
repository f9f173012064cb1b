#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing

extension UringBackend {
    /// Ring thread: fills `sqe` for `request` (a cancel is prepared in `fill()`).
    func prepare(_ sqe: UnsafeMutablePointer<io_uring_sqe>, _ request: IORequest) {
        switch request.operation {
        case .nop:
            io_uring_prep_nop(sqe)
        case .read(let fd, let buffer, let offset):
            if let fixed = request.fixedBuffer, let index = tables.index(for: fixed) {
                io_uring_prep_read_fixed(sqe, fd, buffer.baseAddress, UInt32(buffer.count), UInt64(bitPattern: offset),
                                         index)
            } else {
                io_uring_prep_read(sqe, fd, buffer.baseAddress, UInt32(buffer.count), UInt64(bitPattern: offset))
            }
            // A `.background` handler queue's read: the idle I/O class.
            if request.ioPriority != 0 { sqe.pointee.ioprio = request.ioPriority }
        case .readv(let fd, let iovecs, let count, let offset):
            io_uring_prep_readv(sqe, fd, iovecs, UInt32(count), UInt64(bitPattern: offset))
            if request.ioPriority != 0 { sqe.pointee.ioprio = request.ioPriority }
        case .write(let fd, let buffer, let offset):
            if let fixed = request.fixedBuffer, let index = tables.index(for: fixed) {
                io_uring_prep_write_fixed(sqe, fd, buffer.baseAddress, UInt32(buffer.count),
                                          UInt64(bitPattern: offset), index)
            } else {
                io_uring_prep_write(sqe, fd, buffer.baseAddress, UInt32(buffer.count), UInt64(bitPattern: offset))
            }
            if request.ioPriority != 0 { sqe.pointee.ioprio = request.ioPriority }
        case .writev(let fd, let iovecs, let count, let offset):
            io_uring_prep_writev(sqe, fd, iovecs, UInt32(count), UInt64(bitPattern: offset))
            if request.ioPriority != 0 { sqe.pointee.ioprio = request.ioPriority }
        case .openat(let directory, let path, let flags, let mode):
            io_uring_prep_openat(sqe, directory, path, flags, mode_t(mode))
        case .statx(let directory, let path, let flags, let mask, let buffer):
            cliburing_prep_statx(sqe, directory, path, flags, mask, buffer)
        case .close(let fd):
            io_uring_prep_close(sqe, fd)
        case .fsync(let fd, let dataOnly):
            io_uring_prep_fsync(sqe, fd, dataOnly ? UInt32(IORING_FSYNC_DATASYNC) : 0)
        case .poll(let fd, let events):
            io_uring_prep_poll_add(sqe, fd, events)
        case .renameat(let oldDirectory, let oldPath, let newDirectory, let newPath, let flags):
            io_uring_prep_renameat(sqe, oldDirectory, oldPath, newDirectory, newPath, flags)
        case .unlinkat(let directory, let path, let flags):
            io_uring_prep_unlinkat(sqe, directory, path, flags)
        case .splice(let input, let inputOffset, let output, let outputOffset, let length):
            io_uring_prep_splice(sqe, input, inputOffset, output, outputOffset, UInt32(length), 0)
        case .openChained(let directory, let path, let flags, let mode, let file):
            io_uring_prep_openat_direct(sqe, directory, path, flags, mode_t(mode), UInt32(file.slot))
        case .readChained(let file, let buffer, let offset):
            io_uring_prep_read(sqe, file.slot, buffer.baseAddress, UInt32(buffer.count), UInt64(bitPattern: offset))
            cliburing_sqe_use_fixed_file(sqe)
        case .installChained(let file):
            cliburing_prep_fixed_fd_install(sqe, file.slot)
        case .closeChained(let file):
            io_uring_prep_close_direct(sqe, UInt32(file.slot))
        case .pollMultishot(let fd, let events):
            if multishotPolls {
                io_uring_prep_poll_multishot(sqe, fd, events)
            } else {
                io_uring_prep_poll_add(sqe, fd, events)
            }
        case .timeout(let deadline):
            let clock = timeoutClock == CLOCK_BOOTTIME ? UInt32(IORING_TIMEOUT_BOOTTIME) : 0
            io_uring_prep_timeout(sqe, UnsafeMutablePointer(mutating: deadline), 0, UInt32(IORING_TIMEOUT_ABS) | clock)
        case .cancel:
            fatalError("unreachable: cancels are prepared in fill()")
        }
        if request.forceAsync { cliburing_sqe_add_flags(sqe, cliburing_iosqe_async()) }
        // A registered fd: the SQE names its table index instead.
        if let slot = request.fixedFile, let index = tables.index(for: slot, backend: self) {
            sqe.pointee.fd = index
            cliburing_sqe_use_fixed_file(sqe)
        }
    }

    /// Ring thread: a table slot for the direct descriptor of the chain at the
    /// head of the backlog. With none free, the chain completes now: its
    /// open with `ENFILE` (`noSlot` set), the rest with `ECANCELED`.
    func reserveSlot(for file: ChainedFile) -> Bool {
        if let slot = tables.reserveChainSlot() {
            file.slot = slot
            return true
        }
        file.noSlot = true
        guard let head = backlog.popFirst() else { return false }
        var failed = [head]
        for _ in 1..<head.chainLength { if let r = backlog.popFirst() { failed.append(r) } }
        for (i, r) in failed.enumerated() {
            r.engineState = .done
            r.complete(i == 0 ? -ENFILE : -ECANCELED)
        }
        return false
    }
}
