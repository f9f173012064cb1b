// throughput files: the Foundation rows (FileManager, FileHandle, String).
import Foundation

enum FoundationFiles {
    static func countEnumerator(_ tree: String) -> Int {
        guard let enumerator = FileManager.default.enumerator(atPath: tree) else { return -1 }
        var n = 0
        while enumerator.nextObject() != nil {
            if enumerator.fileAttributes?[.type] as? FileAttributeType == .typeRegular { n += 1 }
        }
        return n
    }

    static func attributes(_ paths: [String]) -> Int {
        var n = 0
        for path in paths {
            if let attributes = try? FileManager.default.attributesOfItem(atPath: path),
               attributes[.type] as? FileAttributeType == .typeRegular { n += 1 }
        }
        return n
    }

    static func linesFileHandle(_ path: String) throws -> Int {
        guard let handle = FileHandle(forReadingAtPath: path) else { return -1 }
        defer { try? handle.close() }
        let data = try handle.readToEnd() ?? Data()
        var pieces = data.split(separator: 0x0A, omittingEmptySubsequences: false)
        if pieces.last?.isEmpty == true { pieces.removeLast() }
        return pieces.count &* 31 &+ pieces.reduce(0) { $0 + $1.count }
    }

    static func linesString(_ path: String) throws -> Int {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var pieces = text.split(separator: "\n", omittingEmptySubsequences: false)
        if pieces.last?.isEmpty == true { pieces.removeLast() }
        return pieces.count &* 31 &+ pieces.reduce(0) { $0 + $1.utf8.count }
    }

    static func readTree(_ root: String) throws -> Int {
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return -1 }
        var sum = 0
        while let name = enumerator.nextObject() as? String {
            guard enumerator.fileAttributes?[.type] as? FileAttributeType == .typeRegular else { continue }
            let data = try Data(contentsOf: URL(fileURLWithPath: root + "/" + name))
            sum &+= data.withUnsafeBytes { FilesBench.fileSum($0) }
        }
        return sum
    }

    static func remove(_ path: String) throws -> Int {
        try FileManager.default.removeItem(atPath: path)
        return FileManager.default.fileExists(atPath: path) ? 0 : 1
    }
}
