#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing

/// One retained object per thread, with no lock: `DataChunk`'s reusable
/// small-read leaf (DataChunk+SmallReads.swift). What a thread's slot holds
/// when the thread ends is given to the `release` function it was put
/// there with.
///
/// (The only caller of the shim's `cliburing_thread_object_*` functions:
/// their state lives in function-local statics, one copy per object file.)
package enum ThreadSlot {
    /// What this thread's slot holds (it is empty after), or nil.
    @inline(__always)
    package static func take() -> UnsafeMutableRawPointer? {
        cliburing_thread_object_take()
    }

    /// Puts `object` in this thread's slot; false when the slot is full
    /// (the caller keeps `object`). `release` (the same function at every
    /// call) is called on it if the thread ends while it is there.
    @inline(__always)
    package static func give(_ object: UnsafeMutableRawPointer,
                             release: @convention(c) (UnsafeMutableRawPointer?) -> Void) -> Bool {
        cliburing_thread_object_give(object, release) != 0
    }
}
