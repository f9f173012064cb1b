#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// How a large file's bytes move.
enum CopyMethod: String, Sendable, CaseIterable {
    /// `copy_file_range(2)` inside the kernel, as cp (the default); where the
    /// file systems refuse it, spliced (`kernel`).
    case range
    /// Spliced through pipes inside the kernel (`IO.copyRanges`); falls back
    /// to channels where the file systems cannot splice.
    case kernel
    /// Read and written through two random channels.
    case channels
}

/// What `--preserve=LIST` keeps (cp's names).
struct Preserve: OptionSet, Sendable {
    let rawValue: Int
    static let mode = Preserve(rawValue: 1)
    static let ownership = Preserve(rawValue: 2)
    static let timestamps = Preserve(rawValue: 4)
    /// Hard links among the sources stay hard links among the copies.
    static let links = Preserve(rawValue: 8)
    /// Extended attributes (ACLs come with `mode`).
    static let xattr = Preserve(rawValue: 16)
    /// `-p`: mode, ownership, timestamps.
    static let standard: Preserve = [.mode, .ownership, .timestamps]
    static let all: Preserve = [.mode, .ownership, .timestamps, .links, .xattr]

    /// "mode,timestamps" and the like; nil (with the bad word) for a name cp does not know.
    static func parse(_ list: String) -> Result<Preserve, BadWord> {
        var set: Preserve = []
        for word in list.split(separator: ",", omittingEmptySubsequences: false) {
            switch word {
            case "mode": set.insert(.mode)
            case "ownership": set.insert(.ownership)
            case "timestamps": set.insert(.timestamps)
            case "links": set.insert(.links)
            case "xattr": set.insert(.xattr)
            case "context": break  // SELinux contexts: the file system's default (no SELinux support)
            case "all": set.formUnion(.all)
            default: return .failure(BadWord(word: String(word)))
            }
        }
        return .success(set)
    }

    struct BadWord: Error { let word: String }
}

/// Which symlinks among the sources are followed (-P, -H, -L).
enum Dereference: Sendable {
    /// Copied as symlinks (-P, -d, the default with -R).
    case never
    /// Those named on the command line (-H).
    case commandLine
    /// All (-L, the default without -R).
    case always
}

/// What is made in place of a copy (-l, -s).
enum LinkInstead: Sendable { case none, hard, symbolic }

/// `--update[=WHEN]`: which existing destinations are replaced.
enum Update: String, Sendable {
    case all
    case none
    /// Only those older than their source (`-u`).
    case older
    case noneFail = "none-fail"
}

/// `--backup[=CONTROL]`.
enum BackupControl: Sendable {
    case none, numbered, existing, simple

    /// cp's names for it ("t", "nil", "never" too); nil for an unknown one.
    init?(_ word: String) {
        switch word {
        case "none", "off": self = .none
        case "numbered", "t": self = .numbered
        case "existing", "nil": self = .existing
        case "simple", "never": self = .simple
        default: return nil
        }
    }
}

/// `--reflink[=WHEN]`: FICLONE, sharing the source's blocks.
enum Reflink: String, Sendable { case never, auto, always }

struct Settings: Sendable {
    var method = CopyMethod.range
    /// Large files bypass the page cache (O_DIRECT, through the channels).
    var direct = false
    var recursive = false
    var preserve: Preserve = []
    /// --no-preserve=mode: new files and directories get the default mode
    /// (0666 or 0777, less the umask), not the source's.
    var defaultModes: Preserve = []
    var noClobber = false
    var force = false
    var verbose = false
    var inPlace = false
    var verify = false
    var jobs = 64
    var dereference = Dereference.always
    var link = LinkInstead.none
    var update = Update.all
    var backup = BackupControl.none
    var suffix = "~"
    var removeDestination = false
    var attributesOnly = false
    var copyContents = false
    var parents = false
    var interactive = false
    var keepDirectorySymlink = false
    var reflink = Reflink.auto
    /// `--sparse=never`: holes are written as zeros.
    var sparseNever = false
    /// `--sparse=always`: blocks of zeros become holes.
    var sparseAlways = false
    var debug = false
    /// POSIXLY_CORRECT: a dangling symlink destination is written through (its target made).
    var posixlyCorrect = false
}
