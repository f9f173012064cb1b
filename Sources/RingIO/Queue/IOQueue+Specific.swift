import RingIOBase

extension IOQueue {
    /// A key for values attached to queues (`setSpecific`/`getSpecific`).
    ///
    /// Keys are compared by identity: two keys made by two `init()` calls
    /// never name the same value.
    ///
    /// The corresponding libdispatch type is the `const void *` key of
    /// `dispatch_queue_set_specific`.
    public final class SpecificKey<Value: Sendable>: Sendable {
        /// A new key.
        public init() {}
    }

    /// Attaches `value` to this queue under `key`; `nil` removes it.
    ///
    /// - Parameters:
    ///   - key: The key.
    ///   - value: The value, or `nil`.
    ///
    /// The corresponding libdispatch function is `dispatch_queue_set_specific`.
    public func setSpecific<Value>(key: SpecificKey<Value>, value: Value?) {
        state.withLock { $0.specifics[ObjectIdentifier(key)] = value }
    }

    /// The value attached to this queue under `key` (this queue's own only,
    /// not its targets').
    ///
    /// - Parameter key: The key.
    /// - Returns: The value, or `nil`.
    ///
    /// The corresponding libdispatch function is `dispatch_queue_get_specific`.
    public func getSpecific<Value>(key: SpecificKey<Value>) -> Value? {
        state.withLock { $0.specifics[ObjectIdentifier(key)] } as? Value
    }

    /// The value under `key` of the queue the calling code runs on, or else
    /// of its target, its target's target and so on.
    ///
    /// - Parameter key: The key.
    /// - Returns: The value, or `nil` (also when the caller runs on no queue).
    ///
    /// The corresponding libdispatch function is `dispatch_get_specific`.
    public static func getSpecific<Value>(key: SpecificKey<Value>) -> Value? {
        var queue = IOQueue.current
        while let q = queue {
            if let value = q.getSpecific(key: key) { return value }
            queue = q.target
        }
        return nil
    }
}
