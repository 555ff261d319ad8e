import type { BatchErrorRow, BatchRow, BatchStatus, FileRow } from '../db/schema'
import type { BatchChanges, BatchEvent, StateTimes } from '../domain/batch-states'
import { type Capability, needsKey } from '../domain/capabilities'
import type { Tally } from '../domain/waiting'
import type { ByteRange, LineSpans } from '../lib/blobs/spans'
import type { NumbersAt } from '../lib/columns'
import type { PageParams } from '../lib/pagination'

// Batches and their validation (docs/api.md §6, docs/api.md §6): creation, reads, and the validator's
// verbs. The state moves go through the state table (src/domain/batch-states.ts).

export interface NewBatch {
  id: string
  user_id: string
  /** The personal key it was created with; null for a JWT (docs/api.md §14 usage by key). */
  api_key_id: string | null
  input_file_id: string
  endpoint: string
  completion_window: string
  metadata: Record<string, string> | null
  now: number
}

/** The row a new batch is stored as (both engines): `validating`, created and updated `now`. */
export function newBatchRow({ now, ...b }: NewBatch) {
  return { ...b, status: 'validating' as const, created_at: now, updated_at: now }
}

export interface FinishedValidation {
  batchId: string
  result: ValidationResult
}

export interface ValidationResult {
  passed: boolean
  model: string | null
  /** docs/api.md §6: what the batch needs of a worker's engine (absent: nothing); stored when it passes. */
  needs?: readonly Capability[]
  request_lines: number
  errors_total: number
  /** The stored errors (at most MAX_STORED_ERRORS), in line order. */
  errors: Pick<BatchErrorRow, 'code' | 'line' | 'field' | 'message'>[]
  /**
   * docs/api.md §16: where each request line starts in the input, for a batch that may be split; stored
   * with the batch when it passes.
   */
  line_offsets?: NumbersAt | null
  /**
   * docs/api.md §6 "Execution order": position → request line, and the input's size in bytes; null
   * (or absent) for the file order. Stored with the index when it passes.
   */
  line_order?: { order: Uint32Array; bytes: number } | null
}

/** The request-line index as stored: little-endian float64s, one per request line. */
export function packLineOffsets(offsets: NumbersAt): Buffer {
  const out = Buffer.allocUnsafe(offsets.length * 8)
  for (let i = 0; i < offsets.length; i++) out.writeDoubleLE(offsets.at(i)!, i * 8)
  return out
}

/** Bytes of one entry of the execution-order spans: start (float64) and length (uint32). */
export const SPAN_BYTES = 12

/**
 * docs/api.md §6 "Execution order" as stored (batch_line_index.spans): the request lines in execution
 * order, each its start (little-endian float64) and its length in bytes up to the next request
 * line, or the end of the input (little-endian uint32): its terminator, and any blank lines after it,
 * included.
 */
export function packLineSpans(offsets: NumbersAt, order: { order: Uint32Array; bytes: number }): Buffer {
  const n = order.order.length
  // Whole 32-bit words (the format's fields fall on 4-byte boundaries), written in this machine's
  // byte order, which is little-endian wherever Bun runs (x64, arm64).
  const words = new Uint32Array(n * (SPAN_BYTES / 4))
  const start = new Float64Array(1)
  const startWords = new Uint32Array(start.buffer)
  for (let k = 0, w = 0; k < n; k++, w += 3) {
    const line = order.order[k]!
    start[0] = offsets.at(line)!
    const end = line + 1 < offsets.length ? offsets.at(line + 1)! : order.bytes
    words[w] = startWords[0]!
    words[w + 1] = startWords[1]!
    words[w + 2] = end - start[0]
  }
  return Buffer.from(words.buffer)
}

/**
 * The batch_line_index row a validation that passed writes (both engines), or null for none: the
 * offsets, or (docs/api.md §6 "Execution order") the spans and no offsets, which nothing reads then.
 */
export function lineIndexRow(batchId: string, result: ValidationResult) {
  if (!result.passed || !result.line_offsets?.length) return null
  const order = result.line_order
  return {
    batch_id: batchId,
    offsets: order ? Buffer.alloc(0) : packLineOffsets(result.line_offsets),
    spans: order ? packLineSpans(result.line_offsets, order) : null,
  }
}

/**
 * A run of request lines as both engines read it from batch_line_index (docs/api.md §16, §6
 * "Execution order"): a slice of `spans` when the batch has an execution order (each line's
 * [start, start + length), its terminator included), else the float64 offsets of the run's first line (`a`) and of the line
 * after it (`b`, null: to the end of the file). Null when the run is outside the index.
 */
export function lineSpansFrom(row: {
  a: Uint8Array | null
  b: Uint8Array | null
  spans: Uint8Array | null
}): LineSpans | null {
  if (row.spans !== null) {
    const bytes = row.spans
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    const ranges: ByteRange[] = []
    for (let at = 0; at + SPAN_BYTES <= bytes.byteLength; at += SPAN_BYTES) {
      const start = view.getFloat64(at, true)
      ranges.push({ start, end: start + view.getUint32(at + 8, true) })
    }
    return ranges.length ? { ranges, lines: true } : null
  }
  const at = (bytes: Uint8Array | null) =>
    bytes?.byteLength === 8 ? new DataView(bytes.buffer, bytes.byteOffset, 8).getFloat64(0, true) : null
  const start = at(row.a)
  return start === null ? null : { ranges: [{ start, end: at(row.b) }], lines: false }
}

/**
 * docs/api.md §6: how a validation's result moves its batch (both engines): validating → validated with
 * its model and request count, or → failed with its error count, finished now.
 */
export function validationMove(
  result: ValidationResult,
  now: number,
): { event: BatchEvent; changes: BatchChanges } {
  return result.passed
    ? {
        event: 'validation_passed',
        // docs/api.md §7 placement: the batch waits from now.
        changes: {
          model: result.model,
          needs: needsKey(result.needs ?? []),
          request_counts_total: result.request_lines,
          errors_total: 0,
          queued_at: now,
          // docs/api.md §6 "Execution order": the order stored with the index (lineIndexRow).
          ordered: !!(result.line_order && result.line_offsets?.length),
        },
      }
    : {
        event: 'validation_failed',
        changes: {
          model: result.model,
          errors_total: result.errors_total,
          failed_at: now,
          completed_at: now,
        },
      }
}

/** A batch as the queue chart sees it (GET /v1/stats/queue). */
export interface BatchTimes extends StateTimes {
  status: BatchStatus
  /** completed + failed requests */
  done: number
}

/** A validated batch whose place in the queue is asked (docs/api.md §6 `waiting`, queued). */
export interface QueuePlace {
  batchId: string
  seq: number
  /** The stored `batches.model` slugs of its catalogue entry (its id and a retired one). */
  models: readonly string[]
}

/** Both engines: each place's tallies, its models' rows summed (an entry with a retired slug has two). */
export function sumQueueTallies(
  places: readonly QueuePlace[],
  ahead: readonly ({ batchId: string } & Tally)[],
  running: ReadonlyMap<string, Tally>,
): Map<string, { ahead: Tally; running: Tally }> {
  const out = new Map<string, { ahead: Tally; running: Tally }>()
  for (const p of places) {
    const r = { batches: 0, requests: 0 }
    for (const m of p.models) {
      r.batches += running.get(m)?.batches ?? 0
      r.requests += running.get(m)?.requests ?? 0
    }
    out.set(p.batchId, { ahead: { batches: 0, requests: 0 }, running: r })
  }
  for (const a of ahead) {
    const t = out.get(a.batchId)!.ahead
    t.batches += a.batches
    t.requests += a.requests
  }
  return out
}

export interface BatchesStore {
  /**
   * POST /v1/batches: checks the caller's input file with `check` and inserts the batch as
   * `validating`, atomically (a DELETE /v1/files or the retention pass cannot slip in between).
   */
  create(
    batch: NewBatch,
    check: (file: Pick<FileRow, 'purpose' | 'expires_at'> | undefined) => void,
  ): Promise<BatchRow>
  /** One batch; with `ownerId`, only if that user owns it (null = any owner: a superadmin). */
  get(batchId: string, ownerId: string | null): Promise<BatchRow | null>
  /** GET /v1/batches: newest first, cursor pagination, optional status filter. */
  page(
    filter: { ownerId: string | null; status?: BatchStatus },
    query: PageParams,
  ): Promise<{ rows: BatchRow[]; has_more: boolean }>
  /** The stored validation errors of each batch, in line order. */
  errorsOf(batchIds: string[]): Promise<Map<string, BatchErrorRow[]>>
  /** Batches waiting for validation, oldest first (the validator's queue, rebuilt at start). */
  validatingIds(): Promise<string[]>
  /**
   * The validator takes the `validating` batches among `batchIds` for `holder` until `until`, in one
   * statement (several instances never validate one batch at once; a crashed holder's lease lapses
   * and another takes over). Leaves out a batch that is not validating or that another live holder
   * has; renews the leases `holder` already has.
   */
  leaseValidations(batchIds: string[], holder: string, now: number, until: number): Promise<BatchRow[]>
  /**
   * docs/api.md §6 `waiting` (queued), for each place: the validated batches of its models created
   * before it (lower seq; batches_validated_model, one index-only range each) and those models'
   * batches in progress, with their requests not yet done. Never a scan of the queue.
   */
  queueTallies(places: readonly QueuePlace[]): Promise<Map<string, { ahead: Tally; running: Tally }>>
  /** How many batches are validating, validated and in progress now. */
  activeCounts(): Promise<Partial<Record<BatchStatus, number>>>
  /**
   * Every batch active now or finished after `since` (two index probes, never the whole history):
   * the queue chart's points are rebuilt from their timestamps.
   */
  timesSince(since: number): Promise<BatchTimes[]>
  /**
   * validating → validated | failed for each item, with its result and its stored errors, all in
   * one transaction (the validator groups the runs that end together). Each answer is the moved
   * row, or null for a batch no longer validating (a stale run: it writes nothing).
   */
  finishValidations(items: FinishedValidation[], now: number): Promise<(BatchRow | null)[]>
}
