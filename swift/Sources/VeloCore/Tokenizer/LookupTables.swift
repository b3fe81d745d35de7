/// Byte string → token id, built once per vocabulary. Tokenizing looks up millions of
/// candidate pieces that are slices of a larger buffer, so the table hashes raw bytes in
/// place (no `[UInt8]` allocated per lookup) with open addressing over a flat key store.
final class ByteStringTable: @unchecked Sendable {
    private let keys: UnsafeMutableBufferPointer<UInt8>
    private let keyOffsets: UnsafeMutableBufferPointer<Int32>   // entry i: keys[offsets[i] ..< offsets[i+1]]
    private let values: UnsafeMutableBufferPointer<Int32>
    private let slots: UnsafeMutableBufferPointer<Int32>        // entry index, or -1 when free
    private let mask: Int
    let count: Int
    /// Length of the longest key, for callers that bound their searches.
    let maxKeyLength: Int

    /// `entries` pairs a key with its value; a repeated key keeps its first value.
    init(_ entries: [(key: [UInt8], value: Int32)]) {
        var capacity = 16
        while capacity < entries.count * 2 { capacity <<= 1 }
        let mask = capacity - 1
        let slots = UnsafeMutableBufferPointer<Int32>.allocate(capacity: capacity)
        slots.initialize(repeating: -1)
        let totalBytes = entries.reduce(0) { $0 + $1.key.count }
        let keys = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: max(totalBytes, 1))
        let keyOffsets = UnsafeMutableBufferPointer<Int32>.allocate(capacity: entries.count + 1)
        let values = UnsafeMutableBufferPointer<Int32>.allocate(capacity: max(entries.count, 1))

        var stored = 0
        var byteCount = 0
        var longest = 0
        keyOffsets[0] = 0
        for (key, value) in entries {
            let found = key.withUnsafeBufferPointer { Self.find($0, keys, keyOffsets, slots, mask) }
            guard found.entry < 0 else { continue }
            for b in key {
                keys[byteCount] = b
                byteCount += 1
            }
            values[stored] = value
            keyOffsets[stored + 1] = Int32(byteCount)
            slots[found.slot] = Int32(stored)
            stored += 1
            longest = max(longest, key.count)
        }
        self.keys = keys
        self.keyOffsets = keyOffsets
        self.values = values
        self.slots = slots
        self.mask = mask
        self.count = stored
        self.maxKeyLength = longest
    }

    deinit {
        keys.deallocate()
        keyOffsets.deallocate()
        values.deallocate()
        slots.deallocate()
    }

    @inline(__always)
    static func hash(_ p: UnsafePointer<UInt8>, _ n: Int) -> Int {
        // FNV-1a with a final avalanche so that short keys spread over the table.
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for i in 0..<n {
            h = (h ^ UInt64(p[i])) &* 0x100_0000_01b3
        }
        h ^= h >> 29
        h = h &* 0xbf58_476d_1ce4_e5b9
        h ^= h >> 32
        return Int(truncatingIfNeeded: h)
    }

    private static func find(_ key: UnsafeBufferPointer<UInt8>, _ keys: UnsafeMutableBufferPointer<UInt8>,
                             _ offsets: UnsafeMutableBufferPointer<Int32>, _ slots: UnsafeMutableBufferPointer<Int32>,
                             _ mask: Int) -> (slot: Int, entry: Int) {
        let n = key.count
        let base = key.baseAddress ?? UnsafePointer(bitPattern: 1)!
        var slot = hash(base, n) & mask
        while true {
            let entry = Int(slots[slot])
            if entry < 0 { return (slot, -1) }
            let start = Int(offsets[entry])
            if Int(offsets[entry + 1]) - start == n {
                var same = true
                for i in 0..<n where keys[start + i] != base[i] {
                    same = false
                    break
                }
                if same { return (slot, entry) }
            }
            slot = (slot + 1) & mask
        }
    }

    /// The value stored for `n` bytes at `p`, or -1.
    @inline(__always)
    func lookup(_ p: UnsafePointer<UInt8>, _ n: Int) -> Int32 {
        let entry = Self.find(UnsafeBufferPointer(start: p, count: n), keys, keyOffsets, slots, mask).entry
        return entry < 0 ? -1 : values[entry]
    }

    func lookup(_ key: [UInt8]) -> Int32 {
        key.withUnsafeBufferPointer { buf in
            let entry = Self.find(buf, keys, keyOffsets, slots, mask).entry
            return entry < 0 ? -1 : values[entry]
        }
    }
}

/// UInt64 → UInt64 map with open addressing, for BPE merge ranks keyed by a pair of ids.
final class IntegerPairTable: @unchecked Sendable {
    private let keys: UnsafeMutableBufferPointer<UInt64>
    private let values: UnsafeMutableBufferPointer<UInt64>
    private let mask: Int
    private static let empty = UInt64.max
    private(set) var count = 0

    init(capacity wanted: Int) {
        var capacity = 16
        while capacity < wanted * 2 { capacity <<= 1 }
        mask = capacity - 1
        keys = .allocate(capacity: capacity)
        keys.initialize(repeating: Self.empty)
        values = .allocate(capacity: capacity)
        values.initialize(repeating: 0)
    }

    deinit {
        keys.deallocate()
        values.deallocate()
    }

    @inline(__always)
    private func slot(for key: UInt64) -> Int {
        var h = key &* 0x9E37_79B9_7F4A_7C15
        h ^= h >> 31
        return Int(truncatingIfNeeded: h) & mask
    }

    /// Inserts unless the key is present (the first insertion wins). Not for `UInt64.max`.
    func insertIfAbsent(_ key: UInt64, _ value: UInt64) {
        var s = slot(for: key)
        while keys[s] != Self.empty {
            if keys[s] == key { return }
            s = (s + 1) & mask
        }
        precondition(count < mask, "IntegerPairTable is full")
        keys[s] = key
        values[s] = value
        count += 1
    }

    @inline(__always)
    func lookup(_ key: UInt64) -> UInt64? {
        var s = slot(for: key)
        while true {
            let k = keys[s]
            if k == key { return values[s] }
            if k == Self.empty { return nil }
            s = (s + 1) & mask
        }
    }
}
