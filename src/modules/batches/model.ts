import { t } from 'elysia'
import type { BatchErrorRow, BatchRow, BatchShardRow } from '../../db/schema'
import type { StateTimes } from '../../domain/batch-states'
import { needsOf } from '../../domain/capabilities'
import { type ShardTally, shardCounts } from '../../domain/shards'
import { type BatchUsage, batchUsage } from '../../domain/usage'
import type { Waiting } from '../../domain/waiting'
import { PageQuery } from '../../lib/pagination'

export const MAX_METADATA_PAIRS = 16

export const BatchModel = {
  create: t.Object(
    {
      input_file_id: t.String({ minLength: 1, maxLength: 128 }),
      // docs/api.md §6: src/domain/batch-line.ts BATCH_ENDPOINTS, the first the default.
      endpoint: t.Optional(
        t.Union([
          t.Literal('/v1/chat/completions'),
          t.Literal('/v1/completions'),
          t.Literal('/v1/embeddings'),
          t.Literal('/v1/responses'),
        ]),
      ),
      // Stored as given; no expiry is produced (docs/api.md §6). OpenAI's form: hours, e.g. "24h".
      completion_window: t.Optional(t.String({ pattern: '^[1-9][0-9]{0,3}h$', maxLength: 5 })),
      metadata: t.Optional(
        t.Union([
          // Keys 1–64 characters (the pattern plus additionalProperties: false enforce it), values ≤ 512.
          t.Record(t.String({ pattern: '^[\\s\\S]{1,64}$' }), t.String({ maxLength: 512 }), {
            maxProperties: MAX_METADATA_PAIRS,
            additionalProperties: false,
          }),
          t.Null(),
        ]),
      ),
    },
    { additionalProperties: false },
  ),
  params: t.Object({ batch_id: t.String({ maxLength: 128 }) }),
  // GET /v1/batches/{id}/events (docs/api.md §6 Events): follow=1 keeps the stream open past validation.
  events: t.Object(
    { follow: t.Optional(t.Union([t.Literal('0'), t.Literal('1')])) },
    { additionalProperties: false },
  ),
  // GET /v1/batches/{id}/shards (docs/api.md §16): pages of shards in shard order.
  shards: t.Object({ ...PageQuery }, { additionalProperties: false }),
  list: t.Object(
    {
      ...PageQuery,
      status: t.Optional(
        t.Union([
          t.Literal('validating'),
          t.Literal('validated'),
          t.Literal('in_progress'),
          t.Literal('completed'),
          t.Literal('failed'),
        ]),
      ),
    },
    { additionalProperties: false },
  ),
}
export type BatchCreate = typeof BatchModel.create.static

export interface BatchErrorObject {
  code: string
  line: number | null
  field: string | null
  message: string
}

// docs/api.md §6: the OpenAI batch object, plus `errors.total` (the true count; `data` holds ≤ 100).
export interface BatchObject extends StateTimes {
  id: string
  object: 'batch'
  endpoint: string
  model: string | null
  /** (ext) docs/api.md §6: the capabilities the batch needs of a worker's engine, set by validation. */
  needs: string[]
  input_file_id: string
  completion_window: string
  status: BatchRow['status']
  output_file_id: string | null
  error_file_id: string | null
  expires_at: null
  attempts: number
  error: string | null
  errors: { object: 'list'; total: number; data: BatchErrorObject[] }
  request_counts: { total: number; completed: number; failed: number }
  /**
   * docs/api.md §6: its output lines' tokens, in OpenAI's shape, once completed; null before (and
   * for a batch completed before usage was kept).
   */
  usage: BatchUsage | null
  metadata: Record<string, string> | null
  /** (ext) docs/api.md §16: how many shards are in each state; null for a batch that runs whole. */
  shards: ShardTally | null
  /** (ext) docs/api.md §6 `waiting`: why a validated batch is not claimed yet; null otherwise. */
  waiting: Waiting | null
}

/** docs/api.md §16 (ext): one shard of a split batch, as GET /v1/batches/{id}/shards lists it. */
export interface ShardObject {
  id: string
  object: 'batch.shard'
  index: number
  first_request: number
  requests: number
  status: 'waiting' | 'running' | 'done'
  attempts: number
  /** The worker running it, or that ran it (done); null while waiting. */
  worker_id: string | null
  worker_name: string | null
  assigned_at: number | null
  /**
   * Backup copies: while running, the worker running the shard's backup copy (null: none); once
   * done, the copy that lost the race (the worker_* above is the copy whose output the shard kept).
   */
  backup_worker_id: string | null
  backup_worker_name: string | null
  backup_assigned_at: number | null
  /** The shard's output is its backup copy's (it finished first). */
  backup_won: boolean
  completed_at: number | null
  request_counts: { total: number; completed: number; failed: number }
}

export function toShardObject(
  s: BatchShardRow & { worker_name: string | null; backup_worker_name: string | null },
): ShardObject {
  const held = s.status !== 'waiting'
  const backup = held && s.backup_worker_id !== null
  return {
    id: s.id,
    object: 'batch.shard',
    index: s.shard_index,
    first_request: s.first_request,
    requests: s.requests,
    status: s.status,
    attempts: s.attempts,
    worker_id: held ? s.worker_id : null,
    worker_name: held ? s.worker_name : null,
    assigned_at: held ? s.assigned_at : null,
    backup_worker_id: backup ? s.backup_worker_id : null,
    backup_worker_name: backup ? s.backup_worker_name : null,
    backup_assigned_at: backup ? s.backup_assigned_at : null,
    backup_won: s.status === 'done' && s.backup_won,
    completed_at: s.completed_at,
    // docs/api.md §16: a running shard's live counts are its copy furthest along.
    request_counts: {
      total: s.requests,
      ...(s.status === 'running'
        ? shardCounts(
            { completed: s.request_counts_completed, failed: s.request_counts_failed },
            backup
              ? { completed: s.backup_request_counts_completed, failed: s.backup_request_counts_failed }
              : null,
          )
        : { completed: s.request_counts_completed, failed: s.request_counts_failed }),
    },
  }
}

/** The API shape of a batch; `errors` are its stored validation errors in line order. */
export function toBatchObject(
  b: BatchRow,
  errors: Pick<BatchErrorRow, 'code' | 'line' | 'field' | 'message'>[],
  shards: ShardTally | null = null,
  waiting: Waiting | null = null,
): BatchObject {
  return {
    id: b.id,
    object: 'batch',
    endpoint: b.endpoint,
    model: b.model,
    needs: needsOf(b.needs),
    input_file_id: b.input_file_id,
    completion_window: b.completion_window,
    status: b.status,
    output_file_id: b.output_file_id,
    error_file_id: b.error_file_id,
    created_at: b.created_at,
    in_progress_at: b.in_progress_at,
    completed_at: b.completed_at,
    failed_at: b.failed_at,
    expires_at: null,
    attempts: b.attempts,
    error: b.error,
    errors: {
      object: 'list',
      total: b.errors_total,
      data: errors.map((e) => ({ code: e.code, line: e.line, field: e.field, message: e.message })),
    },
    request_counts: {
      total: b.request_counts_total,
      completed: b.request_counts_completed,
      failed: b.request_counts_failed,
    },
    usage: b.status === 'completed' && b.usage ? batchUsage(b.usage) : null,
    metadata: b.metadata ?? null,
    shards: b.split ? (shards ?? { total: 0, waiting: 0, running: 0, done: 0 }) : null,
    waiting: b.status === 'validated' ? waiting : null,
  }
}
