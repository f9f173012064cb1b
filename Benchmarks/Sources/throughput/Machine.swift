// The machine a run measured, for the outputs, and the page cache's state.
#if canImport(Glibc)
import Glibc
#endif
import BenchSupport

/// What the outputs record about the machine and the run's surroundings.
struct Machine: Codable {
    var cores: Int
    var cpu: String
    var architecture: String
    var kernel: String
    var memoryGiB: Double
    var filesystem: String
    var mountPoint: String
    var device: String
    var ringIOEngine: String
    var fio: String?
    var swift: String?
    var date: String
    var loadBefore: String
    var loadAfter: String

    init(workspace: Workspace, engine: String, fio: String?, loadBefore: String) {
        cores = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        cpu = Self.field("/proc/cpuinfo", "model name") ?? "unknown"
        var u = utsname()
        Glibc.uname(&u)
        architecture = withUnsafeBytes(of: u.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        kernel = withUnsafeBytes(of: u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let kib = Self.field("/proc/meminfo", "MemTotal").flatMap { Double($0.split(separator: " ").first ?? "") } ?? 0
        memoryGiB = (kib / Double(1 << 20) * 10).rounded() / 10
        filesystem = workspace.filesystem.type
        mountPoint = workspace.filesystem.mountPoint
        device = workspace.filesystem.device
        ringIOEngine = engine
        self.fio = fio
        swift = getenv("RINGIO_BENCH_SWIFT").map { String(cString: $0) }
        date = utcTimestamp(compact: false)
        self.loadBefore = loadBefore
        loadAfter = loadBefore
    }

    /// One line for the table's heading and the chart's footer.
    var summary: String {
        "\(cores) cores (\(cpu)), \(architecture), \(fixed(memoryGiB, 1)) GiB RAM, Linux \(kernel), "
            + "\(filesystem) on \(device); RingIO engine: \(ringIOEngine)"
            + (swift.map { "; \($0)" } ?? "")
    }

    /// The value after "name:" on the first line of `file` that starts with it.
    static func field(_ file: String, _ name: String) -> String? {
        guard let f = fopen(file, "r") else { return nil }
        defer { fclose(f) }
        var line: UnsafeMutablePointer<CChar>? = nil
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, f) > 0 {
            let text = String(cString: line!)
            guard text.hasPrefix(name), let colon = text.firstIndex(of: ":") else { continue }
            return text[text.index(after: colon)...].trimmingCharacters(in: " \t\n")
        }
        return nil
    }
}

extension StringProtocol {
    func trimmingCharacters(in set: String) -> String {
        let chars = Set(set)
        var s = Substring(self)
        while let c = s.first, chars.contains(c) { s.removeFirst() }
        while let c = s.last, chars.contains(c) { s.removeLast() }
        return String(s)
    }
}

/// The 1-, 5- and 15-minute load averages.
func loadAverage() -> String {
    guard let file = fopen("/proc/loadavg", "r") else { return "?" }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 128)
    guard fgets(&buffer, Int32(buffer.count), file) != nil else { return "?" }
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return text.split(separator: " ").prefix(3).joined(separator: " ")
}

/// Now in UTC: "2025-11-23T00:30:05Z", or "20251123-003005" for a directory name.
func utcTimestamp(compact: Bool) -> String {
    var t = time(nil)
    var parts = tm()
    gmtime_r(&t, &parts)
    var buffer = [CChar](repeating: 0, count: 32)
    _ = strftime(&buffer, buffer.count, compact ? "%Y%m%d-%H%M%S" : "%Y-%m-%dT%H:%M:%SZ", &parts)
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Dropping the page cache for `--cold`.
enum PageCache {
    /// Writes back dirty pages and drops clean ones: nil when done, else why not.
    static func drop() -> String? {
        sync()
        let fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else {
            return "cannot open /proc/sys/vm/drop_caches (errno \(errno)\(geteuid() == 0 ? "" : "; not root"))"
        }
        defer { close(fd) }
        let written = write(fd, "3\n", 2)
        return written == 2 ? nil : "writing /proc/sys/vm/drop_caches failed (errno \(errno))"
    }
}
