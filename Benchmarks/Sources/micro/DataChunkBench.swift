// DataChunk beside DispatchData, in the same run.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport
import Dispatch
import RingIO

/// Keeps results alive so that the optimizer cannot drop the work.
nonisolated(unsafe) var sink = 0

/// Seconds per call of `body`, the best of `repeats` runs of `iterations` calls.
func timePerCall(iterations: Int, repeats: Int = 3, _ body: () -> Void) -> Double {
    var best = Double.infinity
    for _ in 0..<repeats {
        let t0 = now()
        for _ in 0..<iterations { body() }
        best = min(best, Double(now() - t0) / 1e9 / Double(iterations))
    }
    return best
}

struct DataRow {
    let name: String
    let ring: Double
    let dispatch: Double
    /// The same work on a `[UInt8]`, where the row has it.
    var array: Double? = nil
}

func dataChunkBenchmarks() -> [DataRow] {
    var rows: [DataRow] = []
    let piece: [UInt8] = Array(0..<16)
    let ringPiece = DataChunk(piece)
    let dispatchPiece = piece.withUnsafeBytes { DispatchData(bytes: $0) }

    // n appends, one at a time: per-append cost.
    for n in [1_000, 10_000, 100_000] {
        let ring = timePerCall(iterations: 1, repeats: 3) {
            var c = DataChunk.empty
            for _ in 0..<n { c = c + ringPiece }
            sink &+= c.count
        } / Double(n)
        let dispatchRepeats = n >= 100_000 ? 1 : 3
        let dispatch = timePerCall(iterations: 1, repeats: dispatchRepeats) {
            var d = DispatchData.empty
            for _ in 0..<n { d.append(dispatchPiece) }
            sink &+= d.count
        } / Double(n)
        rows.append(DataRow(name: "append, per append, n = \(n)", ring: ring, dispatch: dispatch))
    }

    // Subrange of a 10,000-region chunk.
    var ring10k = DataChunk.empty
    var dispatch10k = DispatchData.empty
    for _ in 0..<10_000 {
        ring10k = ring10k + ringPiece
        dispatch10k.append(dispatchPiece)
    }
    var x: UInt64 = 88172645463325252
    func nextRange(_ count: Int) -> Range<Int> {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17
        let lo = Int(x % UInt64(count / 2))
        return lo..<(lo + count / 4)
    }
    rows.append(DataRow(
        name: "subrange of a 10,000-region chunk",
        ring: timePerCall(iterations: 10_000) { sink &+= ring10k.subrange(nextRange(ring10k.count)).count },
        dispatch: timePerCall(iterations: 10_000) { sink &+= dispatch10k.subdata(in: nextRange(dispatch10k.count)).count }))

    // apply over 1 GiB in 1 MiB regions (the same MiB, shared: no memory for a GiB).
    let mib = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
    mib.initializeMemory(as: UInt8.self, repeating: 1)
    let ringMiB = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(mib), deallocator: .none)
    var ringGiB = DataChunk.empty
    var dispatchGiB = DispatchData.empty
    let dispatchMiB = DispatchData(bytesNoCopy: UnsafeRawBufferPointer(mib), deallocator: .custom(nil, {}))
    for _ in 0..<1024 {
        ringGiB = ringGiB + ringMiB
        dispatchGiB.append(dispatchMiB)
    }
    rows.append(DataRow(
        name: "apply over 1 GiB in 1 MiB regions",
        ring: timePerCall(iterations: 200) {
            ringGiB.apply { _, _, bytes in sink &+= Int(bytes[0]); return true }
        },
        dispatch: timePerCall(iterations: 200) {
            dispatchGiB.enumerateBytes { bytes, _, _ in sink &+= Int(bytes[0]) }
        }))

    // map() of a contiguous and of a discontiguous MiB (256 regions of 4 KiB).
    var ringPieces = DataChunk.empty
    var dispatchPieces = DispatchData.empty
    for i in 0..<256 {
        ringPieces = ringPieces + ringMiB.subrange((i * 4096)..<((i + 1) * 4096))
        dispatchPieces.append(dispatchMiB.subdata(in: (i * 4096)..<((i + 1) * 4096)))
    }
    rows.append(DataRow(
        name: "map() of a contiguous 1 MiB",
        ring: timePerCall(iterations: 2000) { sink &+= ringMiB.map().count },
        dispatch: timePerCall(iterations: 2000) { dispatchMiB.withUnsafeBytes { (p: UnsafePointer<UInt8>) in sink &+= Int(p[0]) } }))
    rows.append(DataRow(
        name: "map() of 1 MiB in 256 regions",
        ring: timePerCall(iterations: 200) { sink &+= ringPieces.map().count },
        dispatch: timePerCall(iterations: 200) { dispatchPieces.withUnsafeBytes { (p: UnsafePointer<UInt8>) in sink &+= Int(p[0]) } }))

    // Byte iteration over 1 MiB in 256 regions, per byte.
    rows.append(DataRow(
        name: "iterate 1 MiB in 256 regions, per byte",
        ring: timePerCall(iterations: 5) {
            var s = 0
            for b in ringPieces { s &+= Int(b) }
            sink &+= s
        } / Double(1 << 20),
        dispatch: timePerCall(iterations: 5) {
            var s = 0
            for b in dispatchPieces { s &+= Int(b) }
            sink &+= s
        } / Double(1 << 20)))
    // ... and over a contiguous MiB, beside an Array of the same bytes.
    let arrayMiB = [UInt8](UnsafeRawBufferPointer(mib))
    let ringCopyMiB = DataChunk(arrayMiB)
    let dispatchCopyMiB = arrayMiB.withUnsafeBytes { DispatchData(bytes: $0) }
    rows.append(DataRow(
        name: "iterate a contiguous 1 MiB, per byte",
        ring: timePerCall(iterations: 20) {
            var s = 0
            for b in ringCopyMiB { s &+= Int(b) }
            sink &+= s
        } / Double(1 << 20),
        dispatch: timePerCall(iterations: 20) {
            var s = 0
            for b in dispatchCopyMiB { s &+= Int(b) }
            sink &+= s
        } / Double(1 << 20),
        array: timePerCall(iterations: 20) {
            var s = 0
            for b in arrayMiB { s &+= Int(b) }
            sink &+= s
        } / Double(1 << 20)))
    return rows
}

func formatTime(_ seconds: Double) -> String {
    if seconds < 1e-6 { return fixed(seconds * 1e9, 1) + " ns" }
    if seconds < 1e-3 { return fixed(seconds * 1e6, 2) + " µs" }
    return fixed(seconds * 1e3, 2) + " ms"
}
