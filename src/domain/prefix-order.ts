// Execution order by shared prefix (docs/api.md §6 "Execution order"): at validation each request
// line gets a fixed-size prefix key from its prompt as the engine will see it, and the batch runs in
// the order a walk of the prompts' trie gives: lines sharing a long leading part next to each other,
// the longest shared part first, and lines sharing nothing in file order. Engines keep the KV cache
// of a shared prefix (llama.cpp's slots and host prompt cache, vLLM's block hashes, SGLang's radix
// tree) only while requests sharing it come close together, so the order is what lets them reuse it.
//
// The key: the prompt is cut at fixed character boundaries that double (256, 512, … 16,384, then the
// whole prompt), and each level's hash chains the one before (vLLM's block hashes, at a doubling
// block size): two lines share a level's hash exactly when (but for a hash collision, about 1 in
// 2^53 a pair) they share the prompt up to that boundary. Eight hashes, whatever the prompt's length. A
// doubling step keeps the key small and still finds a shared part to within half its length; a
// collision would only misplace a line, never lose one. A prompt of at most 256 characters is not
// keyed at all: nothing it shares is worth a cache, and a batch of a million short lines pays nothing.
//
// The order is decided in two steps, with memory per line of fixed size and never the prompts. While
// lines stream through validation, each keyed line's key is stored (its line number, 4 bytes; how
// many distinct levels its key has, 1 byte; and 8 bytes a distinct level: 29 bytes for a
// 600-character prompt, at most 69); a line too short to key stores nothing. At the end (finish) each line's parent and depth are found level by
// level over the stored keys: inserting the lines into the trie in file order, a line branches off
// at the deepest node an earlier line made — that node's first line is its parent, the node's depth
// its depth. A table entry is made only for a key a bit-array count says may occur twice, so the
// nodes only one line reaches (most of them: every line's whole prompt, and every level of a line
// that shares nothing) cost no entry. The trie's walk with each node's children in order of first
// appearance is then this tree's walk with each line's children taken deepest-shared first, then in
// file order (sorting the chunk-hash sequences and walking them gives the same order).

import { CHUNK_BITS, Float64Column, IN_CHUNK, Uint8Column, Uint32Column } from '../lib/columns'

/** Characters of the prompt each level of the key covers; the last level is the whole prompt. */
export const PREFIX_LEVELS = [256, 512, 1024, 2048, 4096, 8192, 16384] as const
/** Hashes in a key: one per boundary, and the whole prompt. */
export const KEY_LEVELS = PREFIX_LEVELS.length + 1
/**
 * A prompt of at most this many characters (about 64 tokens) is not ordered: it shares nothing worth
 * a cache, keeps its place among the lines that share nothing, and costs validation no hashing.
 */
export const MIN_ORDERED_CHARS = PREFIX_LEVELS[0]

const text = (v: unknown): string => (typeof v === 'string' ? v : (JSON.stringify(v) ?? ''))

/** Parts of one prompt, reused line after line (promptParts is synchronous). */
const scratch: string[] = []

function push(out: string[], v: unknown) {
  if (v !== undefined && v !== null) out.push(text(v))
}

/** Messages or input items: each one's role (or type), its content, and its tool calls when it has any. */
function pushItems(out: string[], v: unknown) {
  if (!Array.isArray(v)) return push(out, v)
  for (const m of v) {
    if (typeof m !== 'object' || m === null || Array.isArray(m)) {
      push(out, m)
      continue
    }
    push(out, m.role ?? m.type)
    push(out, m.content)
    push(out, m.tool_calls)
  }
}

/**
 * The prompt of a request body as the engine will see it, as its parts in order: chat — the tools
 * (a chat template renders them first), then each message's role and content (system, few-shot, then
 * the rest); completions — the prompt; embeddings — the input; responses — the instructions, the
 * tools, then the input's items. Text is taken as is, anything else as its JSON: the prompt is
 * hashed, never sent, so only its parts and their order matter. Null when the parts hold no more
 * than `min` characters. The array is reused by the next call.
 */
export function promptParts(
  endpoint: string,
  body: Record<string, unknown>,
  min = 0,
): readonly string[] | null {
  const out = scratch
  out.length = 0
  switch (endpoint) {
    case '/v1/completions':
      push(out, body.prompt)
      break
    case '/v1/embeddings':
      push(out, body.input)
      break
    case '/v1/responses':
      push(out, body.instructions)
      push(out, body.tools)
      pushItems(out, body.input)
      break
    default:
      push(out, body.tools)
      pushItems(out, body.messages)
  }
  let length = 0
  for (const p of out) length += p.length
  return length > min ? out : null
}

/** How many characters a prompt's parts hold. */
export function promptLength(parts: readonly string[]): number {
  let n = 0
  for (let i = 0; i < parts.length; i++) n += parts[i]!.length
  return n
}

/** The chain's first seed. */
const SEED = 0x9e3779b97f4a7c15n

/**
 * The last prompt keyed, and its chain after each part: a prompt's leading parts are often the one
 * before's (the same system message, tools or instructions), and the chain over equal parts is the
 * same, so it is taken from here instead of hashed again. It holds the last prompt's parts (the
 * strings, not copies) and KEY_LEVELS numbers a part.
 */
export class KeyChain {
  parts: string[] = []
  /** After part i: the chain, the characters hashed, the levels ended. */
  chain: bigint[] = []
  at: number[] = []
  level: number[] = []
  /** The levels the last prompt ended, in order. */
  readonly out = new Float64Array(KEY_LEVELS)
}

/**
 * The prompt's key: KEY_LEVELS chained 64-bit hashes (wyhash, each link seeded with the chain so far;
 * Bun's xxHash3 keeps only 32 bits of a seed, so a chain of it would hold 32 bits), each stored as the
 * nearest double, written into `out` (a fresh array when omitted). The parts are hashed one after
 * another, each a link of the chain (so two prompts whose parts split differently differ), cut where
 * a level boundary falls: level i < KEY_LEVELS − 1 is the chain up to PREFIX_LEVELS[i] characters
 * when the prompt is longer; from the first boundary it does not pass, every level holds the whole
 * prompt's hash, negated (−1 − h: a prompt that stops at a boundary is not the prefix of a longer one
 * at that level). With `last` (the prompt keyed before, KeyChain), the chain over the leading parts
 * equal to its parts is taken from it, and `last` becomes this prompt. Nothing is joined or copied.
 * Returns how many distinct levels the key has (the whole prompt's level included).
 */
export function prefixKey(
  prompt: string | readonly string[],
  out = new Float64Array(KEY_LEVELS),
  last?: KeyChain,
): number {
  const parts = typeof prompt === 'string' ? [prompt] : prompt
  let h = SEED
  let at = 0
  let level = 0
  let p = 0
  if (last) {
    const same = Math.min(parts.length, last.parts.length)
    while (p < same && parts[p] === last.parts[p]) p++
    if (p > 0) {
      h = last.chain[p - 1]!
      at = last.at[p - 1]!
      level = last.level[p - 1]!
      for (let i = 0; i < level; i++) out[i] = last.out[i]!
    }
    last.parts.length = last.chain.length = last.at.length = last.level.length = p
  }
  for (; p < parts.length; p++) {
    const part = parts[p]!
    let from = 0
    // A boundary inside the rest of this part, with more of the prompt after it: a level ends there.
    while (level < PREFIX_LEVELS.length && at + part.length - from > PREFIX_LEVELS[level]!) {
      const cut = from + PREFIX_LEVELS[level]! - at
      h = Bun.hash.wyhash(part.slice(from, cut), h)
      out[level] = Number(h)
      if (last) last.out[level] = out[level]!
      level++
      at += cut - from
      from = cut
    }
    h = Bun.hash.wyhash(from === 0 ? part : part.slice(from), h)
    at += part.length - from
    if (last) {
      last.parts.push(part)
      last.chain.push(h)
      last.at.push(at)
      last.level.push(level)
    }
  }
  const whole = -1 - Number(h)
  for (let i = level; i < KEY_LEVELS; i++) out[i] = whole
  return level + 1
}

/** A key's top 32 bits (keys are whole numbers, |key| ≤ 2^64): its cell in the bit arrays, and its
 * first slot in a level's table. */
const high = (key: number) => (key / 4294967296) >>> 0

/** The smallest power of two that is at least `n` (and at least 1,024). */
const pow2 = (n: number) => 2 ** Math.max(10, Math.ceil(Math.log2(Math.max(1, n))))

/**
 * One level's prefix nodes met so far: key → the ordinal of its first line (open addressing, grown
 * at half full). It holds a level's first pass, stopped past one key for 32 members, or only the
 * keys the bit arrays let by: it stays small unless many lines share many nodes.
 */
class LevelTable {
  private keys = new Float64Array(1024)
  private firsts = new Uint32Array(1024)
  /** Keys it holds. */
  size = 0

  /** Empty again, keeping its arrays (a level has no more lines than the one before). */
  clear() {
    this.firsts.fill(0)
    this.size = 0
  }

  /** The first line of `key`'s node, or -1 when this is the first (then `o` is stored as that). */
  firstOr(key: number, o: number): number {
    const mask = this.keys.length - 1
    for (let s = high(key) & mask; ; s = (s + 1) & mask) {
      const entry = this.firsts[s]!
      if (entry === 0) break
      if (this.keys[s] === key) return entry - 1
    }
    if (2 * (this.size + 1) > this.keys.length) this.grow()
    this.put(key, o + 1)
    this.size++
    return -1
  }

  get bytes() {
    return this.keys.byteLength + this.firsts.byteLength
  }

  private put(key: number, entry: number) {
    const mask = this.keys.length - 1
    let s = high(key) & mask
    while (this.firsts[s] !== 0) s = (s + 1) & mask
    this.keys[s] = key
    this.firsts[s] = entry
  }

  private grow() {
    const { keys, firsts } = this
    this.keys = new Float64Array(keys.length * 2)
    this.firsts = new Uint32Array(keys.length * 2)
    for (let s = 0; s < keys.length; s++) if (firsts[s] !== 0) this.put(keys[s]!, firsts[s]!)
  }
}

/**
 * Line `o` shares level `level`'s node with `first`, the node's first line: o's parent and depth,
 * and both take part in the next level. Returns how many lines joined the next level (1 or 2).
 * A function of its own, not a closure: a closure over the level's counters would keep them off
 * the registers of finish()'s loops.
 */
function matched(
  parent: Uint32Array,
  depth: Uint8Array,
  reach: Uint8Array,
  o: number,
  first: number,
  level: number,
): number {
  parent[o] = first
  depth[o] = level + 1
  reach[o] = level + 1
  if (reach[first] !== level) return 1
  reach[first] = level + 1
  return 2
}

/**
 * The execution order of a batch, built line by line in file order (add), decided at the end
 * (finish). While lines stream in it holds, for each line whose prompt is keyed (over
 * MIN_ORDERED_CHARS): its line number (4 bytes), how many distinct levels its key has (1 byte) and
 * those levels (8 bytes each: 3 for a 600-character prompt, at most KEY_LEVELS); nothing for the
 * other lines. It never holds a prompt, and there is no table of the prefix nodes while lines stream
 * in.
 */
export class PrefixOrder {
  /** The keyed lines' key levels, one line after another. */
  private keys: Float64Column | null = new Float64Column()
  /** Keyed line (its ordinal among them) → how many levels its key has. */
  private levels: Uint8Column | null = new Uint8Column()
  /** Keyed line → its line number. */
  private line: Uint32Column | null = new Uint32Column()
  private readonly key = new Float64Array(KEY_LEVELS)
  private readonly chain = new KeyChain()
  lines = 0
  /** The most bytes its arrays held at once, finish() included (the benchmark prints it). */
  peakBytes = 0

  /**
   * The next request line's prompt (promptParts, or whole), or null for a line without one; a line
   * without one, or whose prompt is too short to order (MIN_ORDERED_CHARS), shares nothing.
   */
  add(prompt: string | readonly string[] | null) {
    const j = this.lines++
    if (prompt === null) return
    if ((typeof prompt === 'string' ? prompt.length : promptLength(prompt)) <= MIN_ORDERED_CHARS) return
    const levels = prefixKey(prompt, this.key, this.chain)
    const keys = this.keys!
    this.line!.push(j)
    this.levels!.push(levels)
    for (let i = 0; i < levels; i++) keys.push(this.key[i]!)
  }

  /** Bytes its arrays hold now (while lines stream in: the columns above). */
  get bytes() {
    return (this.keys?.bytes ?? 0) + (this.levels?.bytes ?? 0) + (this.line?.bytes ?? 0)
  }

  /**
   * The execution order: position → line (0-based among the lines added), or null when it is the
   * file order (nothing to store). Call once, after the last line.
   *
   * A line's parent is the first line of the deepest prefix node it shares with an earlier line, its
   * depth how many levels that node has: found level by level over the stored keys (a line shares
   * level i with an earlier one only if it shares level i − 1, so each level looks only at the lines
   * whose node one level up holds two lines or more). At each level a table of the level's nodes
   * finds each line's first line; only the lines whose key a count of two in a bit array says may
   * repeat go into it (one bit array marks the keys seen once, another those seen twice, 16 bits of
   * each a line: about 6 % of keys that occur once pass by chance), so a batch whose prompts share
   * nothing builds an almost empty table. The bit arrays and the table are made once and reused by
   * every level (a level has no more lines than the one before).
   */
  finish(): Uint32Array | null {
    const { parent, depth } = this.parents()
    // The keys are done with: the walk does not hold them, nor the column of line numbers, which it
    // reads as one array.
    this.keys = this.levels = null
    const column = this.line!
    const line = column.toArray()
    this.line = null
    const k = line.length
    let shared = 0
    for (let o = 0; o < k; o++) if (depth[o]) shared++
    // The walk's arrays (walkOrder) beside the line numbers (column and array, at the copy),
    // parents and depths.
    const walk = shared ? 4 * (k + 1) + 4 * shared + 4 * this.lines : 0
    this.peakBytes = Math.max(this.peakBytes, column.bytes + 4 * k + 5 * k, 4 * k + 5 * k + walk)
    return walkOrder(this.lines, line, parent, depth)
  }

  /**
   * Each keyed line's parent (the ordinal of its parent among the keyed lines) and depth (0: it
   * shares nothing with an earlier line).
   */
  private parents(): { parent: Uint32Array; depth: Uint8Array } {
    const keyChunks = this.keys!.chunks
    const levelChunks = this.levels!.chunks
    const k = this.line!.length
    this.peakBytes = Math.max(this.peakBytes, this.bytes)
    const parent = new Uint32Array(k)
    const depth = new Uint8Array(k)
    // The levels in which each keyed line takes part so far: level i looks at the lines whose reach
    // is i and whose key has more than i levels.
    const reach = new Uint8Array(k)
    // The bit arrays, made when a level first needs them, at the first level's width (the widest).
    let once: Uint32Array | null = null
    let twice: Uint32Array | null = null
    const table = new LevelTable()
    for (let level = 0, members = k; level < KEY_LEVELS && members > 1; level++) {
      let next = 0
      // First every member's key goes into the table, while it holds at most one key for 32
      // members (no more than the bit arrays' false positives would make it hold): a level whose
      // lines share most of their keys (the first levels of documents × questions) takes one pass
      // and no bit arrays. Past that, the pass is undone and the level starts again with them.
      table.clear()
      const cap = Math.max(256, members >>> 5)
      let stopped = -1
      for (let o = 0, at = 0; o < k; o++) {
        const levels = levelChunks[o >>> CHUNK_BITS]![o & IN_CHUNK]!
        const i = at + level
        at += levels
        if (reach[o] !== level || levels <= level) continue
        const first = table.firstOr(keyChunks[i >>> CHUNK_BITS]![i & IN_CHUNK]!, o)
        if (first >= 0) next += matched(parent, depth, reach, o, first, level)
        else if (table.size > cap) {
          stopped = o
          break
        }
      }
      if (stopped >= 0) {
        for (let o = 0; o < stopped; o++) if (reach[o] === level + 1) reach[o] = level
        next = 0
        once ??= new Uint32Array(pow2(16 * k) >>> 5)
        twice ??= new Uint32Array(once.length)
        // A cell of each bit array per key, of a width that follows the level's lines.
        const mask = pow2(16 * members) - 1
        once.fill(0, 0, (mask + 1) >>> 5)
        twice.fill(0, 0, (mask + 1) >>> 5)
        // The keys seen once, and twice or more: each line's key of this level, read in file order
        // (`at`: where the line's key starts).
        for (let o = 0, at = 0; o < k; o++) {
          const levels = levelChunks[o >>> CHUNK_BITS]![o & IN_CHUNK]!
          const i = at + level
          at += levels
          if (reach[o] !== level || levels <= level) continue
          const c = high(keyChunks[i >>> CHUNK_BITS]![i & IN_CHUNK]!) & mask
          const bit = 1 << (c & 31)
          if (once[c >>> 5]! & bit) twice[c >>> 5]! |= bit
          else once[c >>> 5]! |= bit
        }
        table.clear()
        for (let o = 0, at = 0; o < k; o++) {
          const levels = levelChunks[o >>> CHUNK_BITS]![o & IN_CHUNK]!
          const i = at + level
          at += levels
          if (reach[o] !== level || levels <= level) continue
          const key = keyChunks[i >>> CHUNK_BITS]![i & IN_CHUNK]!
          const c = high(key) & mask
          if (!(twice[c >>> 5]! & (1 << (c & 31)))) continue
          const first = table.firstOr(key, o)
          if (first >= 0) next += matched(parent, depth, reach, o, first, level)
        }
      }
      this.peakBytes = Math.max(
        this.peakBytes,
        this.bytes + 6 * k + (once?.byteLength ?? 0) + (twice?.byteLength ?? 0) + table.bytes,
      )
      members = next
    }
    return { parent, depth }
  }
}

/**
 * The walk of the line tree over `n` lines. `line[o]` is the number of the o-th keyed line (in file
 * order), `depth[o]` how many key levels it shares with its parent `parent[o]` (an ordinal: the
 * first line of the deepest prefix node it shares with an earlier line), 0 when it shares nothing;
 * every line that is not a keyed line's child is a root. A line, then its children — the
 * deepest-shared first, then in file order — each followed by its own subtree; the roots in file
 * order. Null when that is the file order.
 *
 * A child shares more levels with its own children than with its parent (its parent first reached
 * only the nodes below those), so the tree is at most KEY_LEVELS deep: the walk's stack is fixed.
 * Memory: 4 bytes a keyed line for the children lists and their bounds, 4 bytes a line for the
 * order, a bit a keyed line.
 */
export function walkOrder(
  n: number,
  line: Uint32Array,
  parent: Uint32Array,
  depth: Uint8Array,
): Uint32Array | null {
  const k = line.length
  let shared = 0
  let deepest = 0
  for (let o = 0; o < k; o++) {
    const d = depth[o]!
    if (d) shared++
    if (d > deepest) deepest = d
  }
  if (shared === 0) return null
  // Each keyed line's children, deepest first, then in file order: the children counted under their
  // parents, then placed from the back (by depth from the shallowest, in reverse file order), so
  // that `bound[o]` ends as the start of o's children and `bound[o + 1]` as their end.
  const bound = new Uint32Array(k + 1)
  for (let o = 0; o < k; o++) if (depth[o]) bound[parent[o]!]!++
  for (let o = 0, sum = 0; o <= k; o++) {
    sum += bound[o]!
    bound[o] = sum
  }
  const children = new Uint32Array(shared)
  for (let d = 1; d <= deepest; d++)
    for (let o = k - 1; o >= 0; o--) if (depth[o] === d) children[--bound[parent[o]!]!] = o
  // Depth-first from each root in file order: the lines that are no keyed line's child, keyed or not.
  const order = new Uint32Array(n)
  const stack = new Uint32Array(KEY_LEVELS + 1)
  const cursor = new Uint32Array(KEY_LEVELS + 1)
  let at = 0
  let identity = true
  let o = 0
  for (let j = 0; j < n; j++) {
    if (o >= k || line[o] !== j) {
      if (j !== at) identity = false
      order[at++] = j
      continue
    }
    const root = o++
    if (depth[root]) continue
    if (j !== at) identity = false
    order[at++] = j
    let top = 0
    stack[0] = root
    cursor[0] = bound[root]!
    while (top >= 0) {
      const c = cursor[top]!
      if (c === bound[stack[top]! + 1]) {
        top--
        continue
      }
      cursor[top] = c + 1
      const child = children[c]!
      const jc = line[child]!
      if (jc !== at) identity = false
      order[at++] = jc
      stack[++top] = child
      cursor[top] = bound[child]!
    }
  }
  return identity ? null : order
}
