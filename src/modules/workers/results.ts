import { createReadStream, createWriteStream, mkdirSync, renameSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import busboy from 'busboy'
import { eq } from 'drizzle-orm'
import { type BatchRow, batchAssignments, batches, files } from '../../db/schema'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { AppError, badRequest, forbidden, tooLarge } from '../../lib/errors'
import { newId, randomBase62 } from '../../lib/ids'
import { log } from '../../lib/logger'
import { InvalidUtf8Error, LineTooLongError, readLines } from '../../lib/read-lines'
import type { WorkerPrincipal } from '../auth/credentials'
import { transition } from '../batches/states'
import { filePath } from '../files/storage'
import { ownWorkerSqlite, requireHolder } from './service'

// POST /workers/upload-results (SPEC §4, API.md §7). The multipart body is streamed with busboy:
// the output is read once, line by line, and split into the output file (status_code < 400, no
// error) and the error file (everything else, plus a `missing_result` line for every input
// custom_id the worker did not return). The input's custom_ids are held as 64-bit hashes, not
// strings, so memory stays small for large batches. Files are written before the transaction; the
// transition, the file rows and the assignment's completion commit together, or the files go.

export interface UploadResponse {
  batch_id: string
  status: 'completed'
  output_file_id: string | null
  error_file_id: string | null
  request_counts: { total: number; completed: number; failed: number }
  usage: Record<string, number>
}

const FIELDS = new Set(['job_id', 'worker_id', 'assignment_id', 'completed', 'failed'])
// Output lines carry whole responses (embeddings are large): a generous per-line memory bound.
const MAX_OUTPUT_LINE_BYTES = 64 * 1024 * 1024

const invalidOutput = (message: string) => badRequest('invalid_output', message, 'file')

interface Held {
  batch: BatchRow
  workerId: string
  assignmentId: string
}

type Authorized = { kind: 'held'; held: Held } | { kind: 'repeat'; response: UploadResponse }

function responseOf(b: BatchRow): UploadResponse {
  return {
    batch_id: b.id,
    status: 'completed',
    output_file_id: b.output_file_id,
    error_file_id: b.error_file_id,
    request_counts: {
      total: b.request_counts_total,
      completed: b.request_counts_completed,
      failed: b.request_counts_failed,
    },
    usage: b.usage ?? {},
  }
}

function authorize(deps: Deps, principal: WorkerPrincipal, fields: Record<string, string>): Authorized {
  const workerId = fields.worker_id
  const jobId = fields.job_id
  if (!workerId) throw badRequest('missing_field', "Missing required field 'worker_id'", 'worker_id')
  if (!jobId) throw badRequest('missing_field', "Missing required field 'job_id'", 'job_id')
  ownWorkerSqlite(deps, principal, workerId)
  const batch = deps.db.select().from(batches).where(eq(batches.id, jobId)).get()
  // Idempotent: a repeat upload for a batch this worker (this run, when named) completed.
  if (batch?.status === 'completed') {
    const a = deps.db.select().from(batchAssignments).where(eq(batchAssignments.batch_id, jobId)).get()
    if (
      a &&
      a.worker_id === workerId &&
      (fields.assignment_id === undefined || fields.assignment_id === a.id)
    ) {
      return { kind: 'repeat', response: responseOf(batch) }
    }
  }
  const held = requireHolder(deps, workerId, jobId, fields.assignment_id)
  return { kind: 'held', held: { batch: batch!, workerId, assignmentId: held.assignment_id } }
}

// ---------------------------------------------------------------------------------------------
// The input's custom_ids, as 64-bit hashes (exact strings only if two ids ever collide).

class InputIds {
  private index = new Map<bigint | string, number>()
  seen: Uint8Array = new Uint8Array(0)
  constructor(readonly exact: boolean) {}
  key = (id: string) => (this.exact ? id : Bun.hash.wyhash(id))
  /** false on a hash collision. */
  add(id: string): boolean {
    const k = this.key(id)
    if (this.index.has(k)) return false
    this.index.set(k, this.index.size)
    return true
  }
  indexOf = (id: string) => this.index.get(this.key(id))
  get size() {
    return this.index.size
  }
}

async function* inputCustomIds(deps: Deps, batch: BatchRow): AsyncGenerator<string> {
  const source = Bun.file(filePath(deps.config, batch.input_file_id)).stream()
  for await (const [, line] of readLines(source, Math.max(deps.config.MAX_LINE_BYTES, 1024) * 2)) {
    if (line.trim() === '') continue
    const id = (JSON.parse(line) as { custom_id?: unknown }).custom_id
    if (typeof id === 'string') yield id
  }
}

async function readInputIds(deps: Deps, batch: BatchRow): Promise<InputIds> {
  for (const exact of [false, true]) {
    const ids = new InputIds(exact)
    let collided = false
    for await (const id of inputCustomIds(deps, batch)) {
      if (!ids.add(id)) {
        collided = true
        break
      }
    }
    if (!collided || exact) {
      ids.seen = new Uint8Array(ids.size)
      return ids
    }
  }
  throw new Error('unreachable')
}

// ---------------------------------------------------------------------------------------------
// Splitting the worker's output.

interface Split {
  completed: number
  failed: number
  usage: Record<string, number>
  outputTmp: string
  errorTmp: string
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)

function succeeded(line: Record<string, unknown>): boolean {
  const response = line.response
  if (line.error !== undefined && line.error !== null) return false
  return isObject(response) && typeof response.status_code === 'number' && response.status_code < 400
}

function addUsage(total: Record<string, number>, line: Record<string, unknown>) {
  const body = isObject(line.response) ? line.response.body : undefined
  const usage = isObject(body) ? body.usage : undefined
  if (!isObject(usage)) return
  for (const [k, v] of Object.entries(usage)) {
    if (typeof v === 'number' && Number.isFinite(v)) total[k] = (total[k] ?? 0) + v
  }
}

class Sink {
  private stream
  private bytes = 0
  constructor(readonly path: string) {
    this.stream = createWriteStream(path, { mode: 0o600 })
  }
  async write(text: string) {
    this.bytes += Buffer.byteLength(text)
    if (!this.stream.write(text)) await new Promise((r) => this.stream.once('drain', r))
  }
  end(): Promise<number> {
    return new Promise((resolve, reject) => {
      this.stream.once('error', reject)
      this.stream.end(() => resolve(this.bytes))
    })
  }
}

async function splitOutput(
  deps: Deps,
  held: Held,
  source: AsyncIterable<Uint8Array>,
  dir: string,
): Promise<Split> {
  const ids = await readInputIds(deps, held.batch)
  const out = new Sink(join(dir, `.tmp-${randomBase62(16)}`))
  const err = new Sink(join(dir, `.tmp-${randomBase62(16)}`))
  const split = {
    completed: 0,
    failed: 0,
    usage: {} as Record<string, number>,
    outputTmp: out.path,
    errorTmp: err.path,
  }
  try {
    for await (const [n, text] of readLines(source, MAX_OUTPUT_LINE_BYTES, { fatal: true })) {
      if (text.trim() === '') continue
      let line: unknown
      try {
        line = JSON.parse(text)
      } catch {
        throw invalidOutput(`Output line ${n} is not valid JSON`)
      }
      if (!isObject(line) || typeof line.custom_id !== 'string')
        throw invalidOutput(`Output line ${n} has no custom_id`)
      const i = ids.indexOf(line.custom_id)
      if (i === undefined) throw invalidOutput(`Output line ${n}: custom_id is not in the batch input`)
      if (ids.seen[i]) throw invalidOutput(`Output line ${n}: custom_id appears more than once`)
      ids.seen[i] = 1
      if (succeeded(line)) {
        split.completed++
        addUsage(split.usage, line)
        await out.write(text + '\n')
      } else {
        split.failed++
        await err.write(text + '\n')
      }
    }
    // API.md §7: every input custom_id without a result gets a `missing_result` error line.
    for await (const id of inputCustomIds(deps, held.batch)) {
      const i = ids.indexOf(id)
      if (i === undefined || ids.seen[i]) continue
      ids.seen[i] = 1
      split.failed++
      await err.write(
        JSON.stringify({
          id: `batch_req_${randomBase62(24)}`,
          custom_id: id,
          response: null,
          error: { code: 'missing_result', message: 'The worker returned no result for this request' },
        }) + '\n',
      )
    }
  } catch (e) {
    await Promise.allSettled([out.end(), err.end()])
    rmSync(out.path, { force: true })
    rmSync(err.path, { force: true })
    if (e instanceof LineTooLongError) throw invalidOutput(`Output line ${e.line} is too long`)
    if (e instanceof InvalidUtf8Error) throw invalidOutput(`Output line ${e.line} is not valid UTF-8`)
    throw e
  }
  await Promise.all([out.end(), err.end()])
  return split
}

// ---------------------------------------------------------------------------------------------
// The multipart request.

function parseCount(fields: Record<string, string>, name: 'completed' | 'failed'): number | undefined {
  const v = fields[name]
  if (v === undefined) return undefined
  if (!/^\d{1,10}$/.test(v.trim()))
    throw badRequest('invalid_value', `'${name}' must be a non-negative integer`, name)
  return Number(v.trim())
}

export async function uploadResults(
  deps: Deps,
  principal: WorkerPrincipal,
  request: Request,
): Promise<UploadResponse> {
  const contentType = request.headers.get('content-type') ?? ''
  if (!contentType.toLowerCase().startsWith('multipart/form-data') || !request.body) {
    throw badRequest('invalid_content_type', 'upload-results takes multipart/form-data')
  }
  const dir = join(deps.config.DATA_DIR, 'files')
  mkdirSync(dir, { recursive: true })
  const fields: Record<string, string> = {}
  let failure: unknown = null
  const fail = (e: unknown) => {
    failure ??= e
  }
  let authorized: Authorized | null = null
  let work: Promise<Split | null> | null = null
  let spool: string | null = null

  let bb: busboy.Busboy
  try {
    bb = busboy({
      headers: { 'content-type': contentType },
      limits: { files: 1, fields: 16, parts: 17, fieldSize: 1024, fileSize: deps.config.MAX_UPLOAD_BYTES },
    })
  } catch {
    throw badRequest('invalid_multipart', 'The multipart body could not be parsed')
  }
  bb.on('field', (name, value) => {
    if (!FIELDS.has(name)) fail(badRequest('unknown_field', `Unknown field '${name}'`, name))
    else fields[name] = value
  })
  bb.on('file', (name, stream) => {
    stream.on('limit', () =>
      fail(tooLarge('file_too_large', `Uploads are limited to ${deps.config.MAX_UPLOAD_BYTES} bytes`)),
    )
    if (name !== 'file' || work || failure) {
      if (name !== 'file') fail(badRequest('unknown_field', `Unknown field '${name}'`, name))
      else if (work) fail(badRequest('invalid_multipart', 'Only one file may be uploaded'))
      stream.resume()
      return
    }
    // Fields sent before the file (what the reference daemon does) let the output stream straight
    // through; otherwise the file is spooled to disk and split once the fields have arrived.
    if (fields.worker_id && fields.job_id) {
      try {
        authorized = authorize(deps, principal, fields)
      } catch (e) {
        fail(e)
        stream.resume()
        return
      }
      if (authorized.kind === 'repeat') {
        stream.resume()
        work = Promise.resolve(null)
        return
      }
      // On an early exit (invalid output) the rest of the part is drained, not destroyed, so
      // busboy still reaches the end of the body and the client gets its 400.
      const lines = stream.iterator({ destroyOnReturn: false })
      work = splitOutput(deps, authorized.held, lines, dir).catch((e) => {
        stream.resume()
        fail(e)
        return null
      })
    } else {
      spool = join(dir, `.tmp-${randomBase62(16)}`)
      work = pipeline(stream, createWriteStream(spool, { mode: 0o600 })).then(
        () => null,
        (e) => {
          fail(e)
          return null
        },
      )
    }
  })
  const finished = new Promise<void>((resolve) => {
    bb.once('close', resolve)
    bb.once('error', (e) => {
      fail(badRequest('invalid_multipart', `The multipart body could not be parsed: ${(e as Error).message}`))
      resolve()
    })
  })
  try {
    await pipeline(Readable.fromWeb(request.body as never), bb).catch((e) =>
      fail(
        e instanceof AppError ? e : badRequest('invalid_multipart', 'The multipart body could not be parsed'),
      ),
    )
    await finished
    const pending = work as Promise<Split | null> | null
    let split: Split | null = pending ? await pending : null
    if (!failure && !pending) fail(badRequest('missing_field', "Missing required field 'file'", 'file'))
    if (!failure && spool) {
      authorized = authorize(deps, principal, fields)
      if (authorized.kind === 'held')
        split = await splitOutput(deps, authorized.held, createReadStream(spool), dir)
    }
    if (failure) {
      if (split) for (const p of [split.outputTmp, split.errorTmp]) rmSync(p, { force: true })
      throw failure
    }
    const auth = authorized as Authorized | null
    if (!auth) throw badRequest('missing_field', "Missing required field 'job_id'", 'job_id')
    if (auth.kind === 'repeat') return auth.response
    return commit(deps, auth.held, split!, fields)
  } finally {
    if (spool) rmSync(spool, { force: true })
  }
}

function commit(deps: Deps, held: Held, split: Split, fields: Record<string, string>): UploadResponse {
  const { batch } = held
  const cleanup: string[] = [split.outputTmp, split.errorTmp]
  try {
    const completed = parseCount(fields, 'completed')
    const failed = parseCount(fields, 'failed')
    if (
      (completed !== undefined && completed !== split.completed) ||
      (failed !== undefined && failed !== split.failed)
    ) {
      throw badRequest(
        'count_mismatch',
        `The output holds ${split.completed} completed and ${split.failed} failed requests ` +
          `(including missing results); the worker reported ${completed ?? '-'} and ${failed ?? '-'}`,
        completed !== split.completed ? 'completed' : 'failed',
      )
    }
    const now = deps.clock.now()
    const outputId = split.completed > 0 ? newId('file-') : null
    const errorId = split.failed > 0 ? newId('file-') : null
    const placed: { id: string; path: string; purpose: 'batch_output' | 'batch_error'; tmp: string }[] = []
    if (outputId)
      placed.push({
        id: outputId,
        path: filePath(deps.config, outputId),
        purpose: 'batch_output',
        tmp: split.outputTmp,
      })
    if (errorId)
      placed.push({
        id: errorId,
        path: filePath(deps.config, errorId),
        purpose: 'batch_error',
        tmp: split.errorTmp,
      })
    for (const p of placed) {
      renameSync(p.tmp, p.path)
      cleanup.push(p.path)
    }
    const sizes = new Map(placed.map((p) => [p.id, Bun.file(p.path).size]))
    const row = writeTx(deps.db, (tx) => {
      // Re-checked inside the transaction: a requeue or re-claim while the upload streamed wins.
      requireHolder(deps, held.workerId, batch.id, held.assignmentId)
      const row = transition(
        deps,
        batch.id,
        'results_delivered',
        now,
        {
          output_file_id: outputId,
          error_file_id: errorId,
          request_counts_completed: split.completed,
          request_counts_failed: split.failed,
          usage: split.usage,
          completed_at: now,
        },
        `worker ${held.workerId}`,
      )
      if (!row) throw forbidden('not_assigned', 'This batch is not assigned to this worker')
      tx.update(batchAssignments)
        .set({ completed_at: now })
        .where(eq(batchAssignments.batch_id, batch.id))
        .run()
      for (const p of placed) {
        tx.insert(files)
          .values({
            id: p.id,
            user_id: batch.user_id,
            filename: `${batch.id}_${p.purpose === 'batch_output' ? 'output' : 'error'}.jsonl`,
            purpose: p.purpose,
            bytes: sizes.get(p.id)!,
            batch_id: batch.id,
            created_at: now,
          })
          .run()
      }
      return row
    })
    for (const p of [split.outputTmp, split.errorTmp]) rmSync(p, { force: true })
    log.info('batch results stored', {
      batch_id: batch.id,
      worker_id: held.workerId,
      completed: split.completed,
      failed: split.failed,
    })
    return responseOf(row)
  } catch (e) {
    for (const p of cleanup) rmSync(p, { force: true })
    throw e
  }
}
