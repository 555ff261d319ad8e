// The custom_id set of a batch input: the uniqueness check of docs/api.md §6 ("custom_id must be unique
// in the file") in the validator, and the input ids that upload-results matches output lines
// against (docs/api.md §7), kept cheap in memory. A Set of every id string costs ~300 bytes and ~1.3 µs per line; this stores, per
// distinct id, a seeded 32-bit hash and where the id's line sits in the file (16 bytes a slot,
// open addressing, load ≤ 0.75). A hash match is only a suspicion: it is confirmed exactly by
// re-reading the earlier id (`readId`, from the file), so two different ids never count as
// duplicates. Confirmed ids are cached (bounded), so a file repeating one id thousands of times
// costs one re-read, not thousands. The seed is random per set, so colliding ids cannot be
// prepared in advance to make the probe chains long.

const EMPTY = 0
const CACHE_LIMIT = 10_000

/** Reads back the id stored for a line at `offset` with `length` bytes (null if unreadable). */
export type ReadId = (offset: number, length: number) => string | null

export type HashFn = (id: string, seed: number) => number

/** 32-bit FNV-1a over UTF-16 code units, seeded: ~20 ns for a short id, no allocation. */
export const fnv1a32: HashFn = (s, seed) => {
  let h = (0x811c9dc5 ^ seed) >>> 0
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

export class CompactIdSet {
  private capacity = 1024
  private hashes = new Uint32Array(this.capacity)
  // offset + 1 (0 marks an empty slot) and line length: where to re-read the id from.
  private offsets = new Float64Array(this.capacity)
  private lengths = new Uint32Array(this.capacity)
  private count = 0
  private readonly cache = new Map<number, string>()
  private readonly seed = (Math.random() * 0x100000000) >>> 0
  /** How many hash matches needed an exact comparison (for tests and benchmarks). */
  confirmations = 0

  constructor(
    private readonly readId: ReadId,
    private readonly hash: HashFn = fnv1a32,
  ) {}

  get size() {
    return this.count
  }

  /** Bytes held by the table (the cache of confirmed ids aside). */
  get bytes() {
    return this.capacity * 16
  }

  /**
   * Adds `id`, found on the line at `offset`/`length`. Returns true if the same id was added
   * before (the set is unchanged then), false if it is new.
   */
  addIfAbsent(id: string, offset: number, length: number): boolean {
    const h = this.hash(id, this.seed)
    const mask = this.capacity - 1
    let i = h & mask
    while (this.offsets[i] !== EMPTY) {
      if (this.hashes[i] === h && this.same(id, this.offsets[i]! - 1, this.lengths[i]!)) return true
      i = (i + 1) & mask
    }
    this.hashes[i] = h
    this.offsets[i] = offset + 1
    this.lengths[i] = length
    if (++this.count * 4 > this.capacity * 3) this.grow()
    return false
  }

  /**
   * The slot holding `id`, confirmed exactly (a hash match alone is never taken for the id), or
   * -1. A slot stays where it is until the next add.
   */
  find(id: string): number {
    const h = this.hash(id, this.seed)
    const mask = this.capacity - 1
    let i = h & mask
    while (this.offsets[i] !== EMPTY) {
      if (this.hashes[i] === h && this.same(id, this.offsets[i]! - 1, this.lengths[i]!)) return i
      i = (i + 1) & mask
    }
    return -1
  }

  /** How many slots there are (slot numbers run from 0 to slots - 1). */
  get slots() {
    return this.capacity
  }

  /** Where the id in `slot` was found (its line's offset and length), or null for an empty slot. */
  locate(slot: number): { offset: number; length: number } | null {
    const stored = this.offsets[slot]!
    return stored === EMPTY ? null : { offset: stored - 1, length: this.lengths[slot]! }
  }

  private same(id: string, offset: number, length: number): boolean {
    this.confirmations++
    let earlier = this.cache.get(offset)
    if (earlier === undefined) {
      earlier = this.readId(offset, length) ?? undefined
      if (earlier === undefined) return false
      if (this.cache.size < CACHE_LIMIT) this.cache.set(offset, earlier)
    }
    return earlier === id
  }

  private grow() {
    const { hashes, offsets, lengths } = this
    this.capacity *= 2
    this.hashes = new Uint32Array(this.capacity)
    this.offsets = new Float64Array(this.capacity)
    this.lengths = new Uint32Array(this.capacity)
    const mask = this.capacity - 1
    for (let j = 0; j < offsets.length; j++) {
      if (offsets[j] === EMPTY) continue
      let i = hashes[j]! & mask
      while (this.offsets[i] !== EMPTY) i = (i + 1) & mask
      this.hashes[i] = hashes[j]!
      this.offsets[i] = offsets[j]!
      this.lengths[i] = lengths[j]!
    }
  }
}
