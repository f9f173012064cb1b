/// What the command line asks for, as plain values.
///
/// Two parsers make it: `Options.parseFast` for the command lines copies are
/// made with (operands, flags, options with their values), and
/// ArgumentParser (`RingCP`, its property wrappers) for everything else:
/// `--help`, every malformed command line and its error message. The fast one
/// gives up (`nil`) on anything it does not know for certain, and the
/// ArgumentParser path then decides, so both always agree
/// (`OptionsParsingTests` compares them). ArgumentParser builds its model of
/// the command by reflection on every run, about a quarter of a 4 KiB
/// copy's CPU here (2–3 ms); the fast parser takes microseconds.
struct Options: Equatable, Sendable {
    var recursive = false
    var archive = false
    var noDereferenceKeepLinks = false
    var noDereference = false
    var dereference = false
    var dereferenceCommandLine = false
    var preserve = false
    var preserveLists: [String] = []
    var noPreserveLists: [String] = []
    var hardLink = false
    var symbolicLink = false
    var backupShort = false
    var backupControl: String?
    var suffix: String?
    var updateShort = false
    var update: String?
    var removeDestination = false
    var attributesOnly = false
    var copyContents = false
    var parents = false
    var interactive = false
    var keepDirectorySymlink = false
    var reflink = "auto"
    var sparse = "auto"
    var debug = false
    var noClobber = false
    var force = false
    var verbose = false
    var noTargetDirectory = false
    var targetDirectory: String?
    var progress: Bool?
    var verify = false
    var inPlace = false
    var direct = false
    var jobs = 64
    var method = "range"
    var paths: [String] = []

    /// Why these options cannot run together, in the words `RingCP.validate`
    /// gives ArgumentParser; `nil` when they can.
    var invalidReason: String? {
        if jobs < 1 { return "--jobs must be at least 1" }
        if CopyMethod(rawValue: method) == nil { return "--method must be 'range', 'kernel' or 'channels'" }
        if Reflink(rawValue: reflink) == nil { return "invalid argument '\(reflink)' for '--reflink'" }
        if !["auto", "always", "never"].contains(sparse) { return "invalid argument '\(sparse)' for '--sparse'" }
        if let update, Update(rawValue: update) == nil { return "invalid argument '\(update)' for '--update'" }
        if let backupControl, BackupControl(backupControl) == nil {
            return "invalid argument '\(backupControl)' for 'backup type'"
        }
        for list in preserveLists + noPreserveLists {
            if case .failure(let bad) = Preserve.parse(list) { return "invalid argument '\(bad.word)' for '--preserve'" }
        }
        if hardLink && symbolicLink { return "cannot make both hard and symbolic links" }
        let backup = backupShort || (backupControl.flatMap(BackupControl.init) ?? .none) != .none
        if backup && (noClobber || update == "none" || update == "none-fail") {
            return "--backup is mutually exclusive with -n or --update=none"
        }
        if reflink == "always" && sparse != "auto" {
            return "--reflink can be used only with --sparse=auto"
        }
        return nil
    }
}

// MARK: - the fast parser

extension Options {
    /// What the fast parser made of a command line.
    enum FastParse: Equatable {
        /// `--version`, alone.
        case version
        case run(Options)
    }

    /// The flags without a value, by their short letter (`-r`) and long name (`--recursive`).
    private static let flags: [(short: Character?, long: String?, set: @Sendable (inout Options) -> Void)] = [
        ("r", "recursive", { $0.recursive = true }),
        ("R", nil, { $0.recursive = true }),
        ("a", "archive", { $0.archive = true }),
        ("d", nil, { $0.noDereferenceKeepLinks = true }),
        ("P", "no-dereference", { $0.noDereference = true }),
        ("L", "dereference", { $0.dereference = true }),
        ("H", nil, { $0.dereferenceCommandLine = true }),
        ("p", nil, { $0.preserve = true }),
        ("l", "link", { $0.hardLink = true }),
        ("s", "symbolic-link", { $0.symbolicLink = true }),
        ("b", nil, { $0.backupShort = true }),
        ("u", nil, { $0.updateShort = true }),
        (nil, "remove-destination", { $0.removeDestination = true }),
        (nil, "attributes-only", { $0.attributesOnly = true }),
        (nil, "copy-contents", { $0.copyContents = true }),
        (nil, "parents", { $0.parents = true }),
        ("i", "interactive", { $0.interactive = true }),
        (nil, "keep-directory-symlink", { $0.keepDirectorySymlink = true }),
        (nil, "debug", { $0.debug = true }),
        ("n", "no-clobber", { $0.noClobber = true }),
        ("f", "force", { $0.force = true }),
        ("v", "verbose", { $0.verbose = true }),
        ("T", "no-target-directory", { $0.noTargetDirectory = true }),
        (nil, "verify", { $0.verify = true }),
        (nil, "in-place", { $0.inPlace = true }),
        (nil, "direct", { $0.direct = true }),
    ]

    /// The options that take a value, by short letter and long name. Each
    /// setter returns false for a value it cannot take (the parser then gives up).
    private static let valued: [(short: Character?, long: String, set: @Sendable (inout Options, String) -> Bool)] = [
        (nil, "preserve", { $0.preserveLists.append($1); return true }),
        (nil, "no-preserve", { $0.noPreserveLists.append($1); return true }),
        (nil, "backup", { $0.backupControl = $1; return true }),
        ("S", "suffix", { $0.suffix = $1; return true }),
        (nil, "update", { $0.update = $1; return true }),
        (nil, "reflink", { $0.reflink = $1; return true }),
        (nil, "sparse", { $0.sparse = $1; return true }),
        ("t", "target-directory", { $0.targetDirectory = $1; return true }),
        (nil, "jobs", { options, text in
            guard let jobs = Int(text) else { return false }
            options.jobs = jobs
            return true
        }),
        (nil, "method", { $0.method = $1; return true }),
    ]

    /// Parses the command lines a copy is made with, exactly as ArgumentParser
    /// would: operands (`-` is one; after `--`, everything is), bundles of
    /// short flags (`-rpv`), long flags, and options with a value
    /// (`--name=value`, `--name value`, `-t value`), in any order.
    ///
    /// - Returns: `nil` for anything else, and for anything whose outcome is
    ///   an error or help: `--help`, an unknown or repeated option, a flag
    ///   given a value, a value that is missing, empty or starts with `-`,
    ///   `-t` or `-S` inside a bundle, `--version` among other arguments, and
    ///   options that fail `invalidReason`. ArgumentParser handles those.
    static func parseFast(_ arguments: [String]) -> FastParse? {
        if arguments == ["--version"] { return .version }
        var options = Options()
        var seen = Set<String>()  // single-valued options given so far (a repeat goes to ArgumentParser)
        var operandsOnly = false
        var index = 0
        func value(attached: Substring?) -> String? {
            if let attached { return attached.isEmpty ? nil : String(attached) }
            index += 1
            guard index < arguments.count, !arguments[index].isEmpty, !arguments[index].hasPrefix("-") else { return nil }
            return arguments[index]
        }
        while index < arguments.count {
            defer { index += 1 }
            let argument = arguments[index]
            if operandsOnly || argument == "-" || !argument.hasPrefix("-") {
                options.paths.append(argument)
                continue
            }
            if argument == "--" {
                operandsOnly = true
                continue
            }
            if argument.hasPrefix("--") {
                let body = argument.dropFirst(2)
                let name = String(body.prefix { $0 != "=" })
                let attached: Substring? = body.count > name.count ? body.dropFirst(name.count + 1) : nil
                if name == "progress" || name == "no-progress" {
                    // One of the pair, once: ArgumentParser decides how a mix ends.
                    guard attached == nil, options.progress == nil else { return nil }
                    options.progress = name == "progress"
                    continue
                }
                if let flag = flags.first(where: { $0.long == name }) {
                    guard attached == nil else { return nil }
                    flag.set(&options)
                    continue
                }
                guard let option = valued.first(where: { $0.long == name }),
                      let text = value(attached: attached),
                      option.set(&options, text) else { return nil }
                if !name.hasSuffix("preserve") && !seen.insert(name).inserted { return nil }
                continue
            }
            // A bundle of short flags, or one short option and its value.
            let letters = argument.dropFirst()
            if letters.count == 1, let option = valued.first(where: { $0.short == letters.first }) {
                guard let text = value(attached: nil), option.set(&options, text),
                      seen.insert(option.long).inserted else { return nil }
                continue
            }
            for letter in letters {
                guard let flag = flags.first(where: { $0.short == letter }) else { return nil }
                flag.set(&options)
            }
        }
        if options.invalidReason != nil { return nil }
        return .run(options)
    }
}
