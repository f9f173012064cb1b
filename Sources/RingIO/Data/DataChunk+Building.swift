/// Swift-style building and slicing: `+=`, `append(contentsOf:)`, array
/// literals, and `chunk[a..<b]` as a `DataChunk`.
extension DataChunk: ExpressibleByArrayLiteral {
    /// A chunk holding a copy of the literal's bytes: `let magic: DataChunk = [0x7F, 0x45, 0x4C, 0x46]`.
    public init(arrayLiteral bytes: UInt8...) {
        self.init(bytes)
    }

    /// Appends `other`'s regions, without copying bytes. O(log regions).
    public mutating func append(contentsOf other: DataChunk) {
        self = concat(other)
    }

    /// `lhs.append(contentsOf: rhs)`: appends without copying bytes.
    public static func += (lhs: inout DataChunk, rhs: DataChunk) {
        lhs = lhs.concat(rhs)
    }

    /// The bytes in `bounds`, as a new chunk without copying: the same as
    /// `subrange(bounds)`. O(log regions).
    ///
    /// The result is a `DataChunk` whose indices start at 0, like every
    /// chunk's. (Generic code that slices a `Collection` still gets a
    /// `Slice<DataChunk>`, whose indices are the base's, as `Collection`
    /// requires; so do `prefix(_:)`, `dropFirst(_:)` and the like. Wrap one in
    /// `DataChunk(slice)` only if you need a chunk: that copies.)
    ///
    /// - Precondition: `bounds` lies within `0...count`.
    public subscript(bounds: Range<Int>) -> DataChunk {
        subrange(bounds)
    }

    /// The bytes in `bounds` (`chunk[4...]`, `chunk[..<16]`), as a new chunk
    /// without copying. See `subscript(_:)` for a `Range`.
    ///
    /// - Precondition: `bounds` lies within `0...count`.
    public subscript<Bounds: RangeExpression<Int>>(bounds: Bounds) -> DataChunk {
        subrange(bounds.relative(to: 0..<count))
    }

    /// The whole chunk: `chunk[...]`.
    public subscript(_: (UnboundedRange_) -> ()) -> DataChunk {
        self
    }

    /// The same as `contiguous()`: the libdispatch name, kept for code
    /// ported from `DispatchData`. Prefer `contiguous()`, which does not
    /// read like `Sequence.map(_:)`.
    ///
    /// The corresponding libdispatch function is `dispatch_data_create_map`.
    public func map() -> DataChunk {
        contiguous()
    }
}
