#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage

func isWriteError(_ error: Errno) -> Bool {
    [.noSpace, .diskQuotaExceeded, .fileTooLarge, .ioError, .readOnlyFileSystem].contains(error)
}

/// The parent directory of `path` ("." for a bare name).
func parentOf(_ path: FilePath) -> FilePath {
    let parent = path.removingLastComponent()
    return parent.isEmpty ? "." : parent
}

/// strerror's text ("No such file or directory").
func describe(_ error: Errno) -> String {
    String(cString: strerror(error.rawValue))
}

@discardableResult
func writeLine(_ fd: Int32, _ line: String) -> Bool { writeAll(fd, line + "\n") }

/// All of `text` to `fd` (short writes continued, EINTR retried; given up on an error).
/// - Returns: whether every byte was written.
@discardableResult
func writeAll(_ fd: Int32, _ text: String) -> Bool {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return false }
        offset += n
    }
    return true
}
