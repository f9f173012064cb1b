// A libFuzzer target for DataChunk: the input is a program of operations on
// a few chunks, each paired with a [UInt8] model; every result is compared
// with the model's, and a difference stops the process (libFuzzer saves the
// input). Run it with scripts/fuzz.
#if canImport(Glibc)
import Glibc
#endif
import RingIO

/// Reads the program's bytes; past the end it yields zeros.
struct Program {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0
    var atEnd: Bool { position >= bytes.count }
    mutating func byte() -> UInt8 {
        defer { position += 1 }
        return position < bytes.count ? bytes[position] : 0
    }
    mutating func int(below bound: Int) -> Int {
        guard bound > 0 else { return 0 }
        let value = Int(byte()) << 8 | Int(byte())
        return value % bound
    }
}

func require(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError("DataChunk differs from its model: \(message())") }
}

/// Checks every read-only view of `chunk` against `model`.
func check(_ chunk: DataChunk, _ model: [UInt8], _ p: inout Program) {
    require(chunk.count == model.count, "count \(chunk.count) != \(model.count)")
    require(chunk.isEmpty == model.isEmpty, "isEmpty")
    require(model.isEmpty ? chunk.regionCount == 0 : chunk.regionCount >= 1, "regionCount \(chunk.regionCount)")
    switch p.byte() % 7 {
    case 0:  // iteration
        require(Array(chunk) == model, "iteration")
    case 1:  // apply: regions in order, contiguous offsets, the model's bytes
        var next = 0
        var regions = 0
        chunk.apply { region, offset, bytes in
            require(offset == next, "apply offset \(offset) != \(next)")
            require(region.count == bytes.count && bytes.count > 0, "apply region size")
            require(Array(bytes) == Array(model[offset..<(offset + bytes.count)]), "apply bytes at \(offset)")
            next += bytes.count
            regions += 1
            return true
        }
        require(next == model.count && regions == chunk.regionCount, "apply covered \(next) bytes in \(regions) regions")
    case 2:  // map and withUnsafeBytes
        let mapped = chunk.map()
        require(mapped.regionCount <= 1 && mapped == chunk, "map")
        chunk.withUnsafeBytes { require(Array($0) == model, "withUnsafeBytes") }
    case 3:  // region lookup
        guard !model.isEmpty else { return }
        let location = p.int(below: model.count)
        let (region, offset) = chunk.region(containing: location)
        require(offset <= location && location < offset + region.count, "region(containing: \(location))")
        require(Array(region) == Array(model[offset..<(offset + region.count)]), "region bytes")
    case 4:  // subscript
        guard !model.isEmpty else { return }
        let i = p.int(below: model.count)
        require(chunk[i] == model[i], "chunk[\(i)]")
    case 5:  // copyBytes
        let lower = p.int(below: model.count + 1)
        let upper = lower + p.int(below: model.count - lower + 1)
        let room = p.int(below: upper - lower + 1)
        var out = [UInt8](repeating: 0xEE, count: room)
        let n = out.withUnsafeMutableBytes { chunk.copyBytes(to: $0, from: lower..<upper) }
        require(n == room && Array(out[0..<n]) == Array(model[lower..<(lower + n)]), "copyBytes")
    default:  // Collection slicing through indices
        require(chunk.elementsEqual(model), "elementsEqual")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var p = Program(bytes: UnsafeBufferPointer(start: data, count: size))
    var chunks: [DataChunk] = [.empty]
    var models: [[UInt8]] = [[]]
    var steps = 0
    while !p.atEnd && steps < 256 {
        steps += 1
        let a = p.int(below: chunks.count)
        switch p.byte() % 8 {
        case 0:  // a new chunk: copied, no-copy with free, or empty
            let n = Int(p.byte()) % 64
            var bytes: [UInt8] = []
            for _ in 0..<n { bytes.append(p.byte()) }
            if p.byte() % 2 == 0 {
                chunks.append(DataChunk(bytes))
            } else if n > 0 {
                let raw = malloc(n)!
                raw.copyMemory(from: bytes, byteCount: n)
                chunks.append(DataChunk(bytesNoCopy: UnsafeRawBufferPointer(start: raw, count: n), deallocator: .free))
            } else {
                chunks.append(DataChunk())
            }
            models.append(bytes)
        case 1, 2:  // concat
            let b = p.int(below: chunks.count)
            chunks.append(chunks[a].concat(chunks[b]))
            models.append(models[a] + models[b])
        case 3, 4:  // subrange
            let count = models[a].count
            let lower = p.int(below: count + 1)
            let upper = lower + p.int(below: count - lower + 1)
            chunks.append(chunks[a].subrange(lower..<upper))
            models.append(Array(models[a][lower..<upper]))
        case 5:  // equality and hashing
            let b = p.int(below: chunks.count)
            let equal = chunks[a] == chunks[b]
            require(equal == (models[a] == models[b]), "== of \(models[a].count) and \(models[b].count) bytes")
            if equal { require(chunks[a].hashValue == chunks[b].hashValue, "equal chunks hash differently") }
        case 6:  // drop one (its storage may go)
            if chunks.count > 1 {
                chunks.remove(at: a)
                models.remove(at: a)
            }
        default:
            check(chunks[a], models[a], &p)
        }
        if chunks.count > 16 {
            chunks.removeFirst()
            models.removeFirst()
        }
    }
    for (chunk, model) in zip(chunks, models) { require(chunk.count == model.count, "final count") }
    return 0
}

// SwiftPM links an executable target with `main` defined as `<target>_main`,
// so libFuzzer's own `main` is not used: start its driver from here.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

@_cdecl("DataChunkFuzz_main")
func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzz(data, size) }
}
