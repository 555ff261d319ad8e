import type { BatchRow, BatchShardRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { WorkerPrincipal } from '../../domain/principal'
import { checkShardHolder, isShardId, JOIN_LEASE_SECONDS } from '../../domain/shards'
import { addUsage } from '../../domain/usage'
import { checkHolder } from '../../domain/worker-rules'
import { type BlobWriter, scratchKey } from '../../lib/blobs'
import { StreamedReads } from '../../lib/blobs/random-reads'
import { readSpans } from '../../lib/blobs/spans'
import { ensureFreeDisk } from '../../lib/disk'
import { AppError, badRequest, forbidden, tooLarge } from '../../lib/errors'
import { CompactIdSet, fnv1a32, type HashFn } from '../../lib/id-set'
import { newId, randomBase62 } from '../../lib/ids'
import { LineSplitter } from '../../lib/lines'
import { log } from '../../lib/logger'
import { receiveMultipart, refuseUnread } from '../../lib/multipart'
import { InvalidUtf8Error, LineTooLongError, readLines } from '../../lib/read-lines'
import type { LineSpans, ShardResultsRecorded } from '../../store/queue'
import { ownWorker } from './ownership'
import { removeBlobs } from './parts'

// POST /workers/upload-results (docs/api.md §7, docs/api.md §7). The multipart body is read by the one
// receiver (src/lib/multipart.ts): the output is read once, line by line, and split into the
// output file (status_code < 400, no error) and the error file (everything else, plus a
// `missing_result` line for every input custom_id the worker did not return). The input's
// custom_ids are held in the compact id set (src/lib/id-set.ts): a hash match is confirmed by
// re-reading the input line, so a worker-supplied id is never taken for a different input id.
// Both files stream into the blob store and are published just before the transaction that
// records them (the transition, the file rows and the assignment's completion); if it fails,
// they are removed.

export interface UploadResponse {
  batch_id: string
  /** docs/api.md §16: the shard a shard upload answered (its request_counts and usage are the shard's). */
  job_id?: string
  status: 'completed'
  output_file_id: string | null
  error_file_id: string | null
  request_counts: { total: number; completed: number; failed: number }
  usage: Record<string, number>
}

const FIELDS = ['job_id', 'worker_id', 'assignment_id', 'completed', 'failed'] as const
// Result files are written in pieces of about this size (one blob write per piece, not per line).
const WRITE_PIECE_BYTES = 64 * 1024
// Output lines carry whole responses (embeddings are large): a generous per-line memory bound.
const MAX_OUTPUT_LINE_BYTES = 64 * 1024 * 1024

const invalidOutput = (message: string) => badRequest('invalid_output', message, 'file')

interface Held {
  batch: BatchRow
  workerId: string
  assignmentId: string
  /** docs/api.md §16: the shard this upload answers, with where its lines are; absent = whole. */
  shard?: { row: BatchShardRow; spans: LineSpans }
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

async function authorize(
  deps: Deps,
  principal: WorkerPrincipal,
  fields: Record<string, string>,
): Promise<Authorized> {
  const workerId = fields.worker_id
  const jobId = fields.job_id
  if (!workerId) throw badRequest('missing_field', "Missing required field 'worker_id'", 'worker_id')
  if (!jobId) throw badRequest('missing_field', "Missing required field 'job_id'", 'job_id')
  await ownWorker(deps, principal, workerId)
  if (isShardId(jobId)) return authorizeShard(deps, jobId, workerId, fields.assignment_id)
  const { batch, assignment: a } = await deps.store.queue.batchWithAssignment(jobId)
  // Idempotent: a repeat upload for a batch this worker (this run, when named) completed.
  if (batch?.status === 'completed') {
    if (
      a &&
      a.worker_id === workerId &&
      (fields.assignment_id === undefined || fields.assignment_id === a.id)
    ) {
      return { kind: 'repeat', response: responseOf(batch) }
    }
  }
  const held = checkHolder(
    batch && {
      status: batch.status,
      holder: a?.worker_id ?? null,
      assignment_id: a?.id ?? null,
      assignment_completed_at: a?.completed_at ?? null,
    },
    workerId,
    fields.assignment_id,
  )
  return { kind: 'held', held: { batch: batch!, workerId, assignmentId: held.assignment_id } }
}

/** docs/api.md §16: the shard holder rule and fencing; a repeat for a shard this run finished is a 200. */
async function authorizeShard(
  deps: Deps,
  shardId: string,
  workerId: string,
  assignmentId: string | undefined,
): Promise<Authorized> {
  const found = await deps.store.queue.shardWithBatch(shardId)
  const shard = found?.shard
  if (
    found &&
    shard?.status === 'done' &&
    shard.worker_id === workerId &&
    (assignmentId === undefined || assignmentId === shard.assignment_id)
  ) {
    return { kind: 'repeat', response: shardResponseOf(found.batch, shard) }
  }
  // Either copy of the shard may upload (docs/api.md §16 backup copies); the first complete one wins.
  const held = checkShardHolder(
    found && { ...found.shard, batch_status: found.batch.status },
    workerId,
    assignmentId,
  )
  const spans = await deps.store.queue.lineSpans(held.batch_id, held.first_request, held.requests)
  if (!spans) throw new Error(`the request-line index of batch ${held.batch_id} is missing`)
  return {
    kind: 'held',
    held: {
      batch: found!.batch,
      workerId,
      assignmentId: held.copy_assignment_id,
      shard: { row: held, spans },
    },
  }
}

/** A shard upload's answer: the shard's counts; the batch's files once the last shard joined them. */
function shardResponseOf(batch: BatchRow, shard: BatchShardRow): UploadResponse {
  return {
    batch_id: batch.id,
    job_id: shard.id,
    status: 'completed',
    output_file_id: batch.output_file_id,
    error_file_id: batch.error_file_id,
    request_counts: {
      total: shard.requests,
      completed: shard.request_counts_completed,
      failed: shard.request_counts_failed,
    },
    usage: shard.usage ?? {},
  }
}

// ---------------------------------------------------------------------------------------------
// The input's custom_ids.

/** The input's custom_ids, and which of them the output has answered. */
export class InputIds {
  readonly answered: Uint8Array
  constructor(
    private readonly ids: CompactIdSet,
    private readonly reads: StreamedReads,
    private readonly idAt: (offset: number, length: number) => string | null,
  ) {
    this.answered = new Uint8Array(ids.slots)
  }

  /** Marks `id` answered: 'unknown' if it is not an input id, 'repeated' if answered before. */
  answer(id: string): 'ok' | 'unknown' | 'repeated' {
    const slot = this.ids.find(id)
    if (slot < 0) return 'unknown'
    if (this.answered[slot]) return 'repeated'
    this.answered[slot] = 1
    return 'ok'
  }

  /** The ids never answered, in input order. */
  unanswered(): string[] {
    const at: { offset: number; length: number }[] = []
    for (let slot = 0; slot < this.answered.length; slot++) {
      const where = this.answered[slot] ? null : this.ids.locate(slot)
      if (where) at.push(where)
    }
    at.sort((x, y) => x.offset - y.offset)
    return at.map((w) => this.idAt(w.offset, w.length)!)
  }

  close() {
    this.reads.close()
  }
}

/**
 * Reads the batch input once into the id set. `hash` is the set's hash function (tests force
 * collisions with it); the input was validated, so every id is unique.
 */
export async function readInputIds(
  deps: Deps,
  batch: BatchRow,
  hash: HashFn = fnv1a32,
  spans: LineSpans | null = null,
): Promise<InputIds> {
  // docs/api.md §16: a shard's ids are its own lines only (one range read of the input in the file
  // order; its lines' spans in an execution order of its own, §6).
  const source = spans
    ? await readSpans(deps.blobs, batch.input_file_id, spans)
    : await deps.blobs.read(batch.input_file_id)
  if (!source) throw new Error(`the input file of batch ${batch.id} is missing`)
  // Random reads go to the file itself when the stream is one stretch of it, else to a copy.
  const reads = spans?.lines
    ? new StreamedReads(null)
    : new StreamedReads(deps.blobs.localPath(batch.input_file_id), spans?.ranges[0]?.start ?? 0)
  const decoder = new TextDecoder()
  const idOf = (bytes: Uint8Array | null): string | null => {
    if (!bytes) return null
    try {
      const id = (JSON.parse(decoder.decode(bytes)) as { custom_id?: unknown }).custom_id
      return typeof id === 'string' ? id : null
    } catch {
      return null
    }
  }
  const idAt = (offset: number, length: number) => idOf(reads.read(offset, length))
  const ids = new CompactIdSet(idAt, hash)
  const splitter = new LineSplitter(deps.config.MAX_LINE_BYTES, (line, _n, offset, length) => {
    const id = idOf(line)
    if (id !== null) ids.addIfAbsent(id, offset, length)
  })
  try {
    for await (const chunk of source) {
      reads.append(chunk)
      splitter.push(chunk)
    }
    splitter.end()
  } catch (e) {
    reads.close()
    throw e
  }
  return new InputIds(ids, reads, idAt)
}

// ---------------------------------------------------------------------------------------------
// Splitting the worker's output.

/** One result file being written: whole lines, in pieces, into a blob not yet published. */
export class ResultFile {
  readonly writer: BlobWriter
  lines = 0
  private pending: string[] = []
  private pendingChars = 0
  constructor(
    deps: Deps,
    readonly id: string = newId('file-'),
  ) {
    this.writer = deps.blobs.create(this.id)
  }
  async add(line: string) {
    this.lines++
    this.pending.push(line, '\n')
    this.pendingChars += line.length + 1
    if (this.pendingChars >= WRITE_PIECE_BYTES) await this.flush()
  }
  async flush() {
    if (this.pending.length === 0) return
    const piece = Buffer.from(this.pending.join(''))
    this.pending = []
    this.pendingChars = 0
    await this.writer.write(piece)
  }
}

interface Split {
  completed: number
  failed: number
  usage: Record<string, number>
  output: ResultFile
  errors: ResultFile
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)

function succeeded(line: Record<string, unknown>): boolean {
  const response = line.response
  if (line.error !== undefined && line.error !== null) return false
  return isObject(response) && typeof response.status_code === 'number' && response.status_code < 400
}

/** docs/api.md §7: the batch's usage sums its output lines' response.body.usage (src/domain/usage.ts). */
function addLineUsage(total: Record<string, number>, line: Record<string, unknown>) {
  const body = isObject(line.response) ? line.response.body : undefined
  if (isObject(body)) addUsage(total, body.usage)
}

/** docs/api.md §10: the prompt tokens of results the server accepted, and of those the cached ones. */
function countTokens(deps: Deps, usage: Record<string, number>) {
  const { prompt_tokens: prompt, cached_tokens: cached } = usage
  if (prompt !== undefined && prompt > 0) deps.metrics.promptTokens.inc(prompt)
  if (cached !== undefined && cached > 0) deps.metrics.cachedPromptTokens.inc(cached)
}

/** Gives up both result files (nothing of them remains). */
const discard = (split: Split) => Promise.all([split.output.writer.abort(), split.errors.writer.abort()])

async function splitOutput(deps: Deps, held: Held, source: AsyncIterable<Uint8Array>): Promise<Split> {
  const ids = await readInputIds(deps, held.batch, fnv1a32, held.shard?.spans ?? null)
  const split: Split = {
    completed: 0,
    failed: 0,
    usage: {},
    output: new ResultFile(deps),
    errors: new ResultFile(deps),
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
      const answer = ids.answer(line.custom_id)
      if (answer === 'unknown') throw invalidOutput(`Output line ${n}: custom_id is not in the batch input`)
      if (answer === 'repeated') throw invalidOutput(`Output line ${n}: custom_id appears more than once`)
      if (succeeded(line)) {
        split.completed++
        addLineUsage(split.usage, line)
        await split.output.add(text)
      } else {
        split.failed++
        await split.errors.add(text)
      }
    }
    // docs/api.md §7: every input custom_id without a result gets a `missing_result` error line.
    for (const id of ids.unanswered()) {
      split.failed++
      await split.errors.add(
        JSON.stringify({
          id: `batch_req_${randomBase62(24)}`,
          custom_id: id,
          response: null,
          error: { code: 'missing_result', message: 'The worker returned no result for this request' },
        }),
      )
    }
    await split.output.flush()
    await split.errors.flush()
  } catch (e) {
    await discard(split)
    if (e instanceof LineTooLongError) throw invalidOutput(`Output line ${e.line} is too long`)
    if (e instanceof InvalidUtf8Error) throw invalidOutput(`Output line ${e.line} is not valid UTF-8`)
    throw e
  } finally {
    ids.close()
  }
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
  const input = {
    contentType: request.headers.get('content-type'),
    contentLength: request.headers.get('content-length'),
    body: request.body,
  }
  // docs/api.md §15: below MIN_FREE_DISK_BYTES, 507 before anything is written. Nothing changes: the
  // batch stays held by this worker with its attempts, and the worker retries later.
  const declared = Number(input.contentLength ?? Number.NaN)
  try {
    await ensureFreeDisk(deps.disk, deps.config.MIN_FREE_DISK_BYTES, Number.isFinite(declared) ? declared : 0)
  } catch (e) {
    throw e instanceof AppError ? refuseUnread(input, e) : e
  }
  // Fields sent before the file (what the reference daemon does) let the output stream straight
  // through; otherwise the file is kept as a scratch blob and split once the fields have arrived.
  let early: Authorized | null = null
  let split: Split | null = null
  let spool: { key: string; writer: BlobWriter } | null = null
  try {
    const fields = await receiveMultipart(input, {
      fields: FIELDS,
      maxFieldBytes: 1024,
      file: { name: 'file', maxBytes: deps.config.MAX_UPLOAD_BYTES },
      tooLarge: tooLarge('file_too_large', `Uploads are limited to ${deps.config.MAX_UPLOAD_BYTES} bytes`),
      contentTypeHint: 'upload-results takes multipart/form-data',
      async onFile(stream, _info, before) {
        if (before.worker_id && before.job_id) {
          early = await authorize(deps, principal, before)
          if (early.kind === 'held') split = await splitOutput(deps, early.held, stream)
          else for await (const _ of stream);
          return
        }
        const key = scratchKey()
        spool = { key, writer: deps.blobs.create(key) }
        for await (const chunk of stream) await spool.writer.write(chunk)
      },
    })
    // docs/api.md §7 fencing, whatever the field order: the fields as finally received decide, and a
    // run authorized on the fields before the file must still be the same run.
    const final = await authorize(deps, principal, fields)
    const first = early as Authorized | null
    if (final.kind === 'repeat') return final.response
    if (first && (first.kind !== 'held' || first.held.assignmentId !== final.held.assignmentId)) {
      throw forbidden('stale_assignment', 'This assignment is no longer current; stop the job')
    }
    const pending = spool as { key: string; writer: BlobWriter } | null
    if (pending) {
      await pending.writer.publish()
      const source = await deps.blobs.read(pending.key)
      if (!source) throw new Error('the spooled upload disappeared')
      split = await splitOutput(deps, final.held, source)
    }
    const done = split as Split | null
    if (!done) throw badRequest('missing_field', "Missing required field 'file'", 'file')
    split = null
    return final.held.shard
      ? await commitShard(deps, final.held, final.held.shard.row, done, fields)
      : await commit(deps, final.held, done, fields)
  } finally {
    const left = split as Split | null
    if (left) await discard(left)
    const pending = spool as { key: string; writer: BlobWriter } | null
    if (pending) await pending.writer.abort()
  }
}

/** docs/api.md §7: `completed`/`failed` given by the worker must equal what the server counted. */
function checkCounts(split: Split, fields: Record<string, string>) {
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
}

/** Publishes the files that hold lines and gives up the empty ones. */
interface Placed {
  file: ResultFile
  role: 'output' | 'error'
  bytes: number
}

async function place(split: Split): Promise<Placed[]> {
  const placed: Placed[] = []
  for (const [file, role] of [
    [split.output, 'output'],
    [split.errors, 'error'],
  ] as const) {
    if (file.lines === 0) {
      await file.writer.abort()
      continue
    }
    const bytes = await file.writer.publish()
    placed.push({ file, role, bytes })
  }
  return placed
}

/**
 * docs/api.md §16: a shard's results are kept as its parts (blobs, not files yet) and counted into the
 * batch; the upload that brings the batch's last requests joins the parts into its files.
 */
async function commitShard(
  deps: Deps,
  held: Held,
  shard: BatchShardRow,
  split: Split,
  fields: Record<string, string>,
): Promise<UploadResponse> {
  let recorded: ShardResultsRecorded
  try {
    checkCounts(split, fields)
    const placed = await place(split)
    const key = (role: 'output' | 'error') => placed.find((p) => p.role === role)?.file.id ?? null
    recorded = await deps.store.queue.recordShardResults({
      shardId: shard.id,
      workerId: held.workerId,
      assignmentId: held.assignmentId,
      completed: split.completed,
      failed: split.failed,
      usage: split.usage,
      outputKey: key('output'),
      errorKey: key('error'),
      now: deps.clock.now(),
    })
  } catch (e) {
    await discard(split)
    throw e
  }
  countTokens(deps, split.usage)
  // docs/api.md §16 backup copies: whether this upload decided a race between two copies.
  if (recorded.backup) deps.metrics.shardBackups.inc({ outcome: recorded.backup })
  log.info('shard results stored', {
    batch_id: held.batch.id,
    shard_id: shard.id,
    worker_id: held.workerId,
    completed: split.completed,
    failed: split.failed,
    ...(recorded.backup ? { backup: recorded.backup } : {}),
  })
  // The shard is stored whatever becomes of the join: a join that fails is retried by the sweeper.
  const joined = recorded.last
    ? await joinShards(deps, held.batch.id).catch((e) => {
        log.error('joining shards failed', { batch_id: held.batch.id, error: e })
        return null
      })
    : null
  const batch = joined ?? recorded.batch
  return shardResponseOf(batch, {
    ...shard,
    status: 'done',
    request_counts_completed: split.completed,
    request_counts_failed: split.failed,
    usage: split.usage,
  })
}

/**
 * What results_delivered records of a batch's results (docs/api.md §6), for an unsplit upload and
 * for the join of a split batch's shards alike: the counts and usage, and the files placed, owned by
 * the batch's owner, purpose batch_output (docs/api.md §5), kept FILE_RETENTION_DAYS (§15).
 */
function delivery(deps: Deps, batch: BatchRow, split: Split, placed: Placed[], now: number) {
  const days = deps.config.FILE_RETENTION_DAYS
  const expiresAt = days === 0 ? null : now + days * 86_400
  return {
    changes: {
      output_file_id: split.output.lines > 0 ? split.output.id : null,
      error_file_id: split.errors.lines > 0 ? split.errors.id : null,
      request_counts_completed: split.completed,
      request_counts_failed: split.failed,
      usage: split.usage,
      completed_at: now,
    },
    files: placed.map((p) => ({
      id: p.file.id,
      user_id: batch.user_id,
      filename: `${batch.id}_${p.role}.jsonl`,
      purpose: 'batch_output' as const,
      bytes: p.bytes,
      batch_id: batch.id,
      created_at: now,
      expires_at: expiresAt,
    })),
  }
}

/** docs/api.md §16: the join's lease went to another joiner (this one stalled past it). */
class JoinTakenOver extends Error {}

/**
 * docs/api.md §16: the batch's output and error files are its shards' parts joined in shard order,
 * streamed; then in_progress → completed with the counts and usage summed. Run by the upload that
 * brought the last requests, and by the sweeper for a batch whose joiner died. One joiner at a time,
 * on any instance: the join is taken under a lease (renewed while it streams) that names the files
 * it will write before a byte is written, so a joiner that loses the lease stops and removes them,
 * and whoever takes the join over from one that died removes them first; the completion is fenced
 * by the lease, and the parts it leaves stay listed in it until they are removed. Null when the
 * batch is not (or no longer) this joiner's to complete.
 */
export async function joinShards(deps: Deps, batchId: string): Promise<BatchRow | null> {
  const joiner = newId('join_')
  const ids = { output: newId('file-'), errors: newId('file-') }
  let renewedAt = deps.clock.now()
  const taken = await deps.store.queue.takeJoin({
    batchId,
    joiner,
    files: [ids.output, ids.errors],
    now: renewedAt,
    until: renewedAt + JOIN_LEASE_SECONDS,
  })
  if (!taken) return null
  // What a joiner that died (or stalled past its lease) left: nothing refers to it.
  await removeBlobs(deps, taken.left)
  if (!taken.join) {
    await deps.store.queue.endJoin(batchId, joiner)
    return null
  }
  const renew = async () => {
    const now = deps.clock.now()
    if (now - renewedAt < JOIN_LEASE_SECONDS / 3) return
    if (!(await deps.store.queue.renewJoin({ batchId, joiner, until: now + JOIN_LEASE_SECONDS })))
      throw new JoinTakenOver()
    renewedAt = now
  }
  const shards = await deps.store.queue.shardsOf(batchId)
  const batch = (await deps.store.batches.get(batchId, null))!
  const output = new ResultFile(deps, ids.output)
  const errors = new ResultFile(deps, ids.errors)
  const usage: Record<string, number> = {}
  const split = { completed: 0, failed: 0, usage, output, errors }
  let placed: Placed[]
  try {
    for (const shard of shards) {
      await renew()
      split.completed += shard.request_counts_completed
      split.failed += shard.request_counts_failed
      addUsage(usage, shard.usage)
      for (const [key, file] of [
        [shard.output_key, output],
        [shard.error_key, errors],
      ] as const) {
        if (!key) continue
        const part = await deps.blobs.read(key)
        if (!part) throw new Error(`the ${key} part of shard ${shard.id} is missing`)
        // A big part takes long to copy: the lease is renewed as it goes, not only between parts.
        for await (const chunk of part) {
          await renew()
          await file.writer.write(chunk)
        }
        file.lines++
      }
    }
    placed = await place(split)
  } catch (e) {
    await Promise.all([output.writer.abort(), errors.writer.abort()])
    if (e instanceof JoinTakenOver) return null
    throw e
  }
  const now = deps.clock.now()
  // Should this throw, whether it committed is not known: the files stay listed in the lease, and
  // whoever takes the join next removes them if it did not.
  const done = await deps.store.queue.completeSplit({
    batchId,
    joiner,
    ...delivery(deps, batch, split, placed, now),
    now,
    until: now + JOIN_LEASE_SECONDS,
  })
  if (!done) {
    // Another joiner holds the lease, or the batch ended: these files are nobody's.
    await Promise.all([output.writer.abort(), errors.writer.abort()])
    return null
  }
  log.info('batch results joined', {
    batch_id: batchId,
    shards: shards.length,
    completed: split.completed,
    failed: split.failed,
  })
  // The parts: nothing refers to them any more. The lease lists them until they are gone; a failure
  // here leaves them to the sweeper, the batch completed all the same.
  await removeBlobs(deps, done.parts)
    .then(() => deps.store.queue.endJoin(batchId, joiner))
    .catch((e) => log.warn('removing joined parts failed', { batch_id: batchId, error: e }))
  return done.batch
}

async function commit(
  deps: Deps,
  held: Held,
  split: Split,
  fields: Record<string, string>,
): Promise<UploadResponse> {
  const { batch } = held
  try {
    checkCounts(split, fields)
    const placed = await place(split)
    const now = deps.clock.now()
    const row = await deps.store.queue.recordResults({
      batchId: batch.id,
      workerId: held.workerId,
      assignmentId: held.assignmentId,
      ...delivery(deps, batch, split, placed, now),
      now,
    })
    countTokens(deps, split.usage)
    log.info('batch results stored', {
      batch_id: batch.id,
      worker_id: held.workerId,
      completed: split.completed,
      failed: split.failed,
    })
    return responseOf(row)
  } catch (e) {
    // Published or not, both files go (BlobWriter.abort).
    await discard(split)
    throw e
  }
}
