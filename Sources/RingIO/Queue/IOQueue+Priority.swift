import RingIOBase

extension IOQueue {
    /// Quality of service, lowest first.
    ///
    /// When more work is ready than there are workers, a higher priority's
    /// items start first; `.background` work still gets a share of the
    /// starts, so it never starves (see `WorkerPool+Priority.swift`).
    ///
    /// The corresponding libdispatch type is `dispatch_qos_class_t`
    /// (`DispatchQoS.QoSClass`).
    public enum Priority: Int, Sendable, Comparable, CaseIterable {
        /// Work the user does not see (`QOS_CLASS_BACKGROUND`).
        case background
        /// Long-running work the user knows of (`QOS_CLASS_UTILITY`).
        case utility
        /// The default (`QOS_CLASS_DEFAULT`).
        case `default`
        /// Work the user asked for and waits on (`QOS_CLASS_USER_INITIATED`).
        case userInitiated
        /// Work that keeps the user interface going (`QOS_CLASS_USER_INTERACTIVE`).
        case userInteractive

        public static func < (lhs: Priority, rhs: Priority) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// Creates a queue with a priority and, optionally, a target queue.
    ///
    /// A queue with a target runs its items on the target: every queue that
    /// targets one serial queue runs one item at a time with the others (each
    /// still in its own FIFO order), and suspending the target holds them
    /// all. A global queue as the target only sets the priority. The target
    /// is fixed at creation, so targets never form a cycle.
    ///
    /// - Parameters:
    ///   - label: A name shown in debuggers and diagnostics.
    ///   - kind: `.serial` (the default) or `.concurrent`.
    ///   - priority: The queue's own priority; its effective `priority` is
    ///     the higher of this and the target's.
    ///   - target: The queue to run items on; `nil`: the worker pool.
    ///
    /// The corresponding libdispatch functions are `dispatch_queue_create_with_target`
    /// and `dispatch_queue_attr_make_with_qos_class`.
    public convenience init(label: String, kind: Kind = .serial, priority: Priority = .default,
                            target: IOQueue? = nil) {
        self.init(label: label, kind: kind, priority: priority, target: target, runner: nil, globalRoot: false)
    }

    static let globals: [IOQueue] = Priority.allCases.map { priority in
        IOQueue(label: priority == .default ? "ringio.global" : "ringio.global.\(priority)",
                kind: .concurrent, priority: priority, target: nil, runner: nil, globalRoot: true)
    }

    /// The shared concurrent queue of one priority.
    ///
    /// - Parameter priority: The priority of its items.
    /// - Returns: The queue (the same object at every call).
    ///
    /// The corresponding libdispatch function is `dispatch_get_global_queue`.
    public static func global(priority: Priority) -> IOQueue { globals[priority.rawValue] }
}
