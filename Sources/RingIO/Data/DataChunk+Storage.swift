#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIOBase
import RingIOQueue

extension DataChunk {
    /// The bytes of one allocation and the way to give them back.
    ///
    /// Every region that points into these bytes holds the storage; the
    /// deallocator runs exactly once, when the last of them is gone.
    final class Storage: RegionStorage, @unchecked Sendable {
        // @unchecked: `bytes` and `deallocator` are immutable, and the bytes
        // they describe are never written after the storage is created.
        let bytes: UnsafeRawBufferPointer
        let deallocator: Deallocator

        init(bytes: UnsafeRawBufferPointer, deallocator: Deallocator) {
            self.bytes = bytes
            self.deallocator = deallocator
        }

        var registered: RegisteredBuffer? { nil }

        deinit {
            Storage.release(bytes, with: deallocator)
        }

        static func release(_ bytes: UnsafeRawBufferPointer, with deallocator: Deallocator) {
            switch deallocator {
            case .free:
                free(UnsafeMutableRawPointer(mutating: bytes.baseAddress))
            case .unmap:
                if let base = bytes.baseAddress {
                    Syscall.munmap(UnsafeMutableRawPointer(mutating: base), count: bytes.count)
                }
            case .none:
                break
            case .custom(let queue, let body):
                let address = UInt(bitPattern: bytes.baseAddress)
                let count = bytes.count
                (queue ?? IOQueue.global).async {
                    body(UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: address), count: count))
                }
            }
        }

        /// A malloc'ed copy of `source`, freed with `free`.
        static func copying(_ source: UnsafeRawBufferPointer) -> Storage {
            let p = malloc(source.count)!
            p.copyMemory(from: source.baseAddress!, byteCount: source.count)
            return Storage(bytes: UnsafeRawBufferPointer(start: p, count: source.count), deallocator: .free)
        }

        /// Uninitialized malloc'ed bytes, filled by `body` before anyone reads them.
        static func allocate(count: Int, _ body: (UnsafeMutableRawBufferPointer) -> Void) -> Storage {
            let p = malloc(count)!
            body(UnsafeMutableRawBufferPointer(start: p, count: count))
            return Storage(bytes: UnsafeRawBufferPointer(start: p, count: count), deallocator: .free)
        }
    }
}
