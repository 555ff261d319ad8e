// Execution order by shared prefix (docs/api.md §6 "Execution order"): at validation each request
// line gets a fixed-size prefix key from its prompt as the engine will see it, and the batch runs in
// the order a walk of the prompts' trie gives: lines sharing a long leading part next to each other,
// the longest shared part first, and lines sharing nothing in file order. Engines keep the KV cache
// of a shared prefix (llama.cpp's slots and host prompt cache, vLLM's block hashes, SGLang's radix
// tree) only while requests sharing it come close together, so the order is what lets them reuse it.
//
// The key: the prompt is cut at fixed character boundaries that double (256, 512, … 16,384, then the
// whole prompt), and each level's hash chains the one before (vLLM's block hashes, at a doubling
// block size): two lines share a level's hash exactly when (but for a hash collision, 1 in 2^53 a
// pair) they share the prompt up to that boundary. Eight hashes, whatever the prompt's length. A
// doubling step keeps the key small and still finds a shared part to within half its length; a
// collision would only misplace a line, never lose one. A prompt of at most 256 characters is not
// keyed at all: nothing it shares is worth a cache, and a batch of a million short lines pays nothing.
//
// The order is computed online, as lines stream through validation, with memory per line of fixed
// size (for a line that shares a prefix: its parent and its depth, 9 bytes; nothing for the others)
// plus one table entry per distinct prefix node — never the prompts. Inserting the lines into the trie in file order, a line branches off at the deepest node an
// earlier line made: that node's first line is its parent, the node's depth its depth. The trie's walk
// with each node's children in order of first appearance is then this tree's walk with each line's
// children taken deepest-shared first, then in file order (sorting the chunk-hash sequences and
// walking them gives the same order, at eight hashes a line).

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
export const promptLength = (parts: readonly string[]) => parts.reduce((n, p) => n + p.length, 0)

const SEED = 0x9e3779b97f4a7c15n
/** The whole prompt's level is marked as ending there: a prompt that stops at a boundary is not the
 * prefix of a longer one at that level. */
const END = '\u0003'

/**
 * The prompt's key: KEY_LEVELS chained 64-bit hashes (xxHash3, kept to 53 bits so a number holds one
 * exactly), written into `out` (a fresh array when omitted). The parts are hashed one after another
 * (each a link of the chain, so two prompts whose parts split differently differ), cut where a level
 * boundary falls: level i < KEY_LEVELS − 1 is the chain up to PREFIX_LEVELS[i] characters when the
 * prompt is longer; from the first boundary it does not pass, every level holds the whole prompt's
 * hash. Nothing is joined or copied. Returns how many distinct levels the key has (the whole
 * prompt's level included).
 */
export function prefixKey(prompt: string | readonly string[], out = new Float64Array(KEY_LEVELS)): number {
  const parts = typeof prompt === 'string' ? [prompt] : prompt
  let h = SEED
  let at = 0
  let level = 0
  for (const part of parts) {
    let from = 0
    // A boundary inside the rest of this part, with more of the prompt after it: a level ends there.
    while (level < PREFIX_LEVELS.length && at + part.length - from > PREFIX_LEVELS[level]!) {
      const cut = from + PREFIX_LEVELS[level]! - at
      h = Bun.hash.xxHash3(part.slice(from, cut), h)
      out[level++] = Number(h >> 11n)
      at += cut - from
      from = cut
    }
    h = Bun.hash.xxHash3(from === 0 ? part : part.slice(from), h)
    at += part.length - from
  }
  h = Bun.hash.xxHash3(END, h)
  out.fill(Number(h >> 11n), level)
  return level + 1
}

/** No entry in the node table. */
const NONE = 0xffffffff

/**
 * The prefix trie's nodes met so far (a node's key → the first line that reached it): an open
 * addressing table of two typed arrays, doubled at half full.
 */
class NodeTable {
  private keys = new Float64Array(1 << 12)
  private lines = new Uint32Array(1 << 12).fill(NONE)
  private size = 0

  get(key: number): number {
    const mask = this.keys.length - 1
    for (let i = mix(key) & mask; ; i = (i + 1) & mask) {
      const line = this.lines[i]!
      if (line === NONE) return NONE
      if (this.keys[i] === key) return line
    }
  }

  set(key: number, line: number) {
    if (2 * (this.size + 1) > this.keys.length) this.grow()
    this.put(key, line)
    this.size++
  }

  get bytes() {
    return this.keys.byteLength + this.lines.byteLength
  }

  private put(key: number, line: number) {
    const mask = this.keys.length - 1
    let i = mix(key) & mask
    while (this.lines[i] !== NONE) i = (i + 1) & mask
    this.keys[i] = key
    this.lines[i] = line
  }

  private grow() {
    const { keys, lines } = this
    this.keys = new Float64Array(keys.length * 2)
    this.lines = new Uint32Array(keys.length * 2).fill(NONE)
    for (let i = 0; i < keys.length; i++) if (lines[i] !== NONE) this.put(keys[i]!, lines[i]!)
  }
}

/** A slot for a key (its low 32 bits; the keys are hashes already). */
const mix = (k: number) => k >>> 0

/** A growable typed array: `a`, or a copy twice as long when `need` passes its length. */
function room<T extends Uint32Array | Uint8Array>(a: T, need: number): T {
  if (need <= a.length) return a
  const b = new (a.constructor as new (n: number) => T)(a.length * 2)
  b.set(a)
  return b
}

/**
 * The execution order of a batch, built line by line in file order (add), decided at the end
 * (finish). Memory: 9 bytes for each line that shares a prefix with an earlier one (its number, its
 * parent's, its depth), nothing for the others, and the node table; never a prompt.
 */
export class PrefixOrder {
  private child = new Uint32Array(256)
  private parent = new Uint32Array(256)
  private depth = new Uint8Array(256)
  private shared = 0
  private table: NodeTable | null = new NodeTable()
  private readonly key = new Float64Array(KEY_LEVELS)
  lines = 0

  /**
   * The next request line's prompt (promptParts, or whole), or null for a line without one; a line
   * without one, or whose prompt is too short to order (MIN_ORDERED_CHARS), shares nothing.
   */
  add(prompt: string | readonly string[] | null) {
    const j = this.lines++
    if (prompt === null) return
    if ((typeof prompt === 'string' ? prompt.length : promptLength(prompt)) <= MIN_ORDERED_CHARS) return
    const table = this.table!
    const levels = prefixKey(prompt, this.key)
    let parent = NONE
    let d = 0
    for (; d < levels; d++) {
      const first = table.get(this.key[d]!)
      if (first === NONE) break
      parent = first
    }
    for (let i = d; i < levels; i++) table.set(this.key[i]!, j)
    if (d === 0) return
    const k = this.shared++
    this.child = room(this.child, k + 1)
    this.parent = room(this.parent, k + 1)
    this.depth = room(this.depth, k + 1)
    this.child[k] = j
    this.parent[k] = parent
    this.depth[k] = d
  }

  /** Bytes held now (the benchmark's figure). */
  get bytes() {
    return this.child.byteLength + this.parent.byteLength + this.depth.byteLength + (this.table?.bytes ?? 0)
  }

  /**
   * The execution order: position → line (0-based among the lines added), or null when it is the
   * file order (nothing to store). Call once, after the last line.
   */
  finish(): Uint32Array | null {
    this.table = null
    const k = this.shared
    return walkOrder(
      this.lines,
      this.child.subarray(0, k),
      this.parent.subarray(0, k),
      this.depth.subarray(0, k),
    )
  }
}

/**
 * The walk of the line tree over `n` lines, given the lines that share a prefix with an earlier one
 * (`child[i]`, in file order), each with its parent (the first line of the deepest prefix node it
 * shares with an earlier line) and its depth (how many key levels it shares with it); every other
 * line is a root. A line, then its children — the deepest-shared first, then in file order — each
 * followed by its own subtree; the roots in file order. Null when that is the file order.
 */
export function walkOrder(
  n: number,
  child: Uint32Array,
  parent: Uint32Array,
  depth: Uint8Array,
): Uint32Array | null {
  const k = child.length
  if (k === 0) return null
  // Each line's children, deepest first, then in file order: the shared lines in that order (a
  // counting sort by depth, stable), then placed under their parents.
  const byDepth = new Uint32Array(k)
  const perDepth = new Uint32Array(KEY_LEVELS + 2)
  for (let i = 0; i < k; i++) perDepth[KEY_LEVELS - depth[i]!]!++
  for (let d = 0, at = 0; d < perDepth.length; d++) {
    const c = perDepth[d]!
    perDepth[d] = at
    at += c
  }
  for (let i = 0; i < k; i++) byDepth[perDepth[KEY_LEVELS - depth[i]!]!++] = i
  const start = new Uint32Array(n + 1)
  for (let i = 0; i < k; i++) start[parent[i]! + 1]!++
  for (let j = 0; j < n; j++) start[j + 1]! += start[j]!
  const fill = start.slice(0, n)
  const children = new Uint32Array(k)
  const isChild = new Uint8Array(n)
  for (const i of byDepth) {
    children[fill[parent[i]!]!++] = child[i]!
    isChild[child[i]!] = 1
  }
  // Depth-first from each root in file order, iteratively (a root and at most every shared line).
  const stack = new Uint32Array(k + 1)
  const order = new Uint32Array(n)
  let at = 0
  let identity = true
  for (let root = 0; root < n; root++) {
    if (isChild[root]) continue
    let top = 0
    stack[top++] = root
    while (top > 0) {
      const j = stack[--top]!
      if (j !== at) identity = false
      order[at++] = j
      for (let c = start[j + 1]! - 1; c >= start[j]!; c--) stack[top++] = children[c]!
    }
  }
  return identity ? null : order
}

/** The execution order of prompts given whole (callers holding every prompt). */
export function executionOrder(prompts: readonly (string | readonly string[] | null)[]): Uint32Array | null {
  const o = new PrefixOrder()
  for (const p of prompts) o.add(p)
  return o.finish()
}
