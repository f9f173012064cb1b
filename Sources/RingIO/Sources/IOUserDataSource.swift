import RingIOQueue

/// A source the program itself triggers: ``merge(_:)`` from any thread
/// adds, ORs or replaces a value, and the handler receives what was merged
/// since the last delivery.
///
/// ```swift
/// let progress = IOUserDataSource(merge: .add, queue: IOQueue(label: "progress"))
/// progress.setEventHandler { print("\(progress.data) more items done") }
/// progress.activate()
/// progress.merge(1)
/// ```
///
/// The corresponding libdispatch types are `DISPATCH_SOURCE_TYPE_DATA_ADD`,
/// `_OR` and `_REPLACE`.
public final class IOUserDataSource: IOSource, @unchecked Sendable {
    // @unchecked: no state of its own beyond IOSource's.

    /// How merged values combine into one delivery's ``IOSource/data``.
    public enum Merge: Sendable {
        /// Values add up (wrapping at `UInt.max`).
        case add
        /// Values are ORed together.
        case or
        /// The latest value wins.
        case replace
    }

    /// Creates an inactive user-data source.
    ///
    /// - Parameters:
    ///   - merge: how values combine.
    ///   - queue: where the handlers run.
    public init(merge: Merge, queue: IOQueue) {
        let kind: MergeKind
        switch merge {
        case .add: kind = .add
        case .or: kind = .or
        case .replace: kind = .replace
        }
        super.init(queue: queue, merge: kind)
    }

    /// Merges `value` into the pending data and schedules a delivery. Never
    /// blocks; callable from any thread, also before activation (the value
    /// is then delivered after it). A 0 is ignored (no delivery).
    ///
    /// The corresponding libdispatch function is `dispatch_source_merge_data`.
    public func merge(_ value: UInt) {
        guard value != 0 else { return }
        mergeEvent(value)
    }
}
