import { closeSync, mkdtempSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LineSplitter } from '../lib/lines'
import { type Api, ApiFailure, type Batch } from './api'
import { download } from './download'
import { ClientError, EXIT } from './exit'

// `--input-order` of `gridkeep results`, `wait` and `submit --wait` (docs/api.md §6 "Output order"): a batch's output and error files
// come in its execution order, not its input's (OpenAI promises no order either; custom_id is the
// key). This puts a downloaded result file back into the input's order: each input line's custom_id
// is hashed (xxHash3, 53 bits) beside its position, sorted once; each result line is keyed by the
// position of its custom_id's hash (a binary search), and the lines are written out in that order,
// read back one by one from the downloaded file. Memory: about 40 bytes a line, never a line's
// text. A result line whose custom_id is not in the input (none, from the server) keeps its place
// after the rest; two ids sharing a hash (about 1 in 10^4 for a million ids) could only swap places.
// A line over MAX_LINE_BYTES (in the input or a result file) stops it with a clear message: left
// out, its line would silently be missing or out of place.

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

/** A line the reordering cannot read whole (over MAX_LINE_BYTES): exit 3 (docs/guide.md "Exit codes"). */
export class LineTooLong extends ClientError {
  constructor(what: string, line: number) {
    super(
      EXIT.invalid,
      `cannot restore the input's order: line ${line} of ${what} is longer than ${MAX_LINE_BYTES / 1024 / 1024} MiB; download it without --input-order (each line's custom_id names its request)`,
      { line },
    )
  }
}

/**
 * Every line of the file at `path` (`what` names it in an error): its offset and length, as the
 * splitter finds them.
 */
async function eachLine(
  path: string,
  what: string,
  onLine: (line: Uint8Array, offset: number, length: number) => void,
) {
  const splitter = new LineSplitter(MAX_LINE_BYTES, (line, n, offset, length) => {
    if (line === null) throw new LineTooLong(what, n)
    onLine(line, offset, length)
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

  static async read(inputPath: string, what = inputPath): Promise<InputOrder> {
    let hashes = new Float64Array(1024)
    let n = 0
    await eachLine(inputPath, what, (line) => {
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
 * order; returns the bytes written. `what` names `from` in an error.
 */
export async function writeInInputOrder(
  order: InputOrder,
  from: string,
  to: string,
  what = from,
): Promise<number> {
  let n = 0
  let keys = new Float64Array(1024)
  let starts = new Float64Array(1024)
  let lengths = new Uint32Array(1024)
  await eachLine(from, what, (line, offset, length) => {
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

/** How a completed batch's result files are written: `save(fileId, path)`; `close()` when done. */
export interface ResultWriter {
  save(fileId: string | null, path: string): Promise<number>
  close(): void
}

/**
 * The result files of batch `b` as the server serves them (in execution order), or with
 * `inputOrder` in the input's (docs/api.md §6 "Output order"): the input is downloaded once (its
 * custom_ids give the order; a batch's input file may have been deleted since, by its owner or by
 * retention: exit 3, saying so), each result file to a scratch copy, then rewritten in that order.
 * `close()` removes the scratch files.
 */
export async function resultWriter(api: Api, b: Batch, inputOrder: boolean): Promise<ResultWriter> {
  if (!inputOrder) return { save: (fileId, path) => download(api, fileId, path), close() {} }
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-order-'))
  const remove = () => rmSync(dir, { recursive: true, force: true })
  let order: InputOrder
  try {
    const input = join(dir, 'input.jsonl')
    try {
      await download(api, b.input_file_id, input)
    } catch (e) {
      if (e instanceof ApiFailure && e.status === 404)
        throw new ClientError(
          EXIT.invalid,
          `the input file ${b.input_file_id} of batch ${b.id} is gone: its order cannot be restored (the output's custom_ids still name each request)`,
          { batch_id: b.id, input_file_id: b.input_file_id },
        )
      throw e
    }
    order = await InputOrder.read(input, `the input file ${b.input_file_id}`)
    rmSync(input)
  } catch (e) {
    remove()
    throw e
  }
  return {
    async save(fileId, path) {
      if (fileId === null) return download(api, null, path)
      const raw = join(dir, 'result.jsonl')
      await download(api, fileId, raw)
      const bytes = await writeInInputOrder(order, raw, path, `the result file ${fileId}`)
      rmSync(raw)
      return bytes
    },
    close: remove,
  }
}
