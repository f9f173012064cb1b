// Foundation interop for DataChunk, in its own module so that the core
// library does not make its users link Foundation.
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import RingIO

extension DataChunk: ContiguousBytes {}

extension DataChunk: DataProtocol {
    /// The chunk's regions, each a one-region chunk; no bytes are copied.
    public var regions: [DataChunk] {
        var out: [DataChunk] = []
        out.reserveCapacity(regionCount)
        apply { region, _, _ in
            out.append(region)
            return true
        }
        return out
    }
}

extension Data {
    /// A `Data` holding a copy of the chunk's bytes, copied region by region.
    public init(_ chunk: DataChunk) {
        self.init(count: chunk.count)
        withUnsafeMutableBytes { destination in
            _ = chunk.copyBytes(to: destination, from: 0..<chunk.count)
        }
    }
}

extension DataChunk {
    /// A chunk holding a copy of `data`'s bytes, in one region.
    public init(_ data: Data) {
        self = data.withUnsafeBytes { DataChunk(copying: $0) }
    }
}
