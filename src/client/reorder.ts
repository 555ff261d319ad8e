import { closeSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs'
import { LineSplitter } from '../lib/lines'

// `gridkeep results --input-order` (docs/api.md §6 "Output order"): a batch's output and error files
// come in its execution order, not its input's (OpenAI promises no order either; custom_id is the
// key). This puts a downloaded result file back into the input's order: each input line's custom_id
// is hashed (xxHash3, 53 bits) beside its position, sorted once; each result line is keyed by the
// position of its custom_id's hash (a binary search), and the lines are written out in that order,
// read back one by one from the downloaded file. Memory: about 40 bytes a line, never a line's
// text. A result line whose custom_id is not in the input (none, from the server) keeps its place
// after the rest; two ids sharing a hash (about 1 in 10^4 for a million ids) could only swap places.

const MAX_LINE_BYTES = 64 * 1024 * 1024
const decoder = new TextDecoder()

function customIdOf(bytes: Uint8Array): string | null {
  try {
    const id = (JSON.parse(decoder.decode(bytes)) as { custom_id?: unknown }).custom_id
    return typeof id === 'string' ? id : null
  } catch {
    return null
  }
}

const hashOf = (id: string) => Number(Bun.hash.xxHash3(id) >> 11n)

/** Every line of the file at `path`: its offset and length, as the splitter finds them. */
async function eachLine(path: string, onLine: (line: Uint8Array, offset: number, length: number) => void) {
  const splitter = new LineSplitter(MAX_LINE_BYTES, (line, _n, offset, length) => {
    if (line) onLine(line, offset, length)
  })
  for await (const chunk of Bun.file(path).stream()) splitter.push(chunk)
  splitter.end()
}

/** A growable typed array. */
function grown<T extends Float64Array | Uint32Array>(a: T, need: number): T {
  if (need <= a.length) return a
  const b = new (a.constructor as new (n: number) => T)(Math.max(need, a.length * 2))
  b.set(a)
  return b
}

/** The input's custom_ids (their hashes, sorted) with the position of each in the input. */
export class InputOrder {
  private constructor(
    private readonly hashes: Float64Array,
    private readonly positions: Uint32Array,
  ) {}

  static async read(inputPath: string): Promise<InputOrder> {
    let hashes = new Float64Array(1024)
    let n = 0
    await eachLine(inputPath, (line) => {
      const id = customIdOf(line)
      if (id === null) return
      hashes = grown(hashes, n + 1)
      hashes[n++] = hashOf(id)
    })
    const byHash = new Uint32Array(n)
    for (let i = 0; i < n; i++) byHash[i] = i
    byHash.sort((a, b) => hashes[a]! - hashes[b]! || a - b)
    const sorted = new Float64Array(n)
    for (let k = 0; k < n; k++) sorted[k] = hashes[byHash[k]!]!
    return new InputOrder(sorted, byHash)
  }

  /** `id`'s position in the input, or Infinity when it is not there. */
  positionOf(id: string | null): number {
    if (id === null) return Number.POSITIVE_INFINITY
    const h = hashOf(id)
    let lo = 0
    let hi = this.hashes.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.hashes[mid]! < h) lo = mid + 1
      else hi = mid
    }
    return this.hashes[lo] === h ? this.positions[lo]! : Number.POSITIVE_INFINITY
  }
}

/**
 * Writes the lines of the result file `from` to `to` (a path, or '-' for stdout) in the input's
 * order; returns the bytes written.
 */
export async function writeInInputOrder(order: InputOrder, from: string, to: string): Promise<number> {
  let n = 0
  let keys = new Float64Array(1024)
  let starts = new Float64Array(1024)
  let lengths = new Uint32Array(1024)
  await eachLine(from, (line, offset, length) => {
    keys = grown(keys, n + 1)
    starts = grown(starts, n + 1)
    lengths = grown(lengths, n + 1)
    keys[n] = order.positionOf(customIdOf(line))
    starts[n] = offset
    lengths[n] = length
    n++
  })
  const perm = new Uint32Array(n)
  for (let i = 0; i < n; i++) perm[i] = i
  perm.sort((a, b) => keys[a]! - keys[b]! || a - b)
  const src = openSync(from, 'r')
  const partial = `${to}.part`
  const out = to === '-' ? 1 : openSync(partial, 'w', 0o644)
  let written = 0
  const pending: Uint8Array[] = []
  let pendingBytes = 0
  const flush = () => {
    const piece = Buffer.concat(pending)
    let done = 0
    while (done < piece.length) done += writeSync(out, piece, done)
    written += piece.length
    pending.length = 0
    pendingBytes = 0
  }
  try {
    for (const i of perm) {
      const line = new Uint8Array(lengths[i]! + 1)
      readSync(src, line, 0, lengths[i]!, starts[i]!)
      line[lengths[i]!] = 10
      pending.push(line)
      pendingBytes += line.length
      if (pendingBytes >= 1 << 20) flush()
    }
    flush()
  } catch (e) {
    if (out !== 1) rmSync(partial, { force: true })
    throw e
  } finally {
    closeSync(src)
    if (out !== 1) closeSync(out)
  }
  if (out !== 1) renameSync(partial, to)
  return written
}
