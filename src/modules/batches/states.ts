import { and, eq, sql } from 'drizzle-orm'
import { type BatchRow, type BatchStatus, batches } from '../../db/schema'
import type { Tx } from '../../db/tx'
import { log } from '../../lib/logger'

// SPEC §3 "Batch status", as data. These five are the only states; `cancelling`, `cancelled`,
// `expired` and `finalizing` are never produced. Every status change in the codebase goes through
// transition() below, which refuses any move outside this table.
//
//   validating  ← POST /v1/batches creates it; left by the validator (src/services/validator.ts)
//   validated   ← validation passed, or a requeue; left when POST /workers/poll claims it
//   in_progress ← claimed; left by upload-results, report-failure or the sweeper
//   completed   terminal
//   failed      terminal (validation errors, or the last attempt failed)

export const BATCH_STATUSES = ['validating', 'validated', 'in_progress', 'completed', 'failed'] as const

export const BATCH_TRANSITIONS = {
  validation_passed: { from: 'validating', to: 'validated', by: 'asynchronous validation finds no errors' },
  validation_failed: { from: 'validating', to: 'failed', by: 'asynchronous validation finds errors' },
  claimed: { from: 'validated', to: 'in_progress', by: 'POST /workers/poll: a compatible worker claims it' },
  requeued: {
    from: 'in_progress',
    to: 'validated',
    by: 'report-failure, the sweeper or re-registration, attempts after increment below the maximum',
  },
  attempts_exhausted: {
    from: 'in_progress',
    to: 'failed',
    by: 'report-failure, the sweeper or re-registration on the last attempt',
  },
  results_delivered: { from: 'in_progress', to: 'completed', by: 'POST /workers/upload-results' },
} as const satisfies Record<string, { from: BatchStatus; to: BatchStatus; by: string }>

export type BatchEvent = keyof typeof BATCH_TRANSITIONS

export class IllegalTransitionError extends Error {
  constructor(
    readonly from: BatchStatus,
    readonly to: BatchStatus,
  ) {
    super(`illegal batch transition ${from} → ${to}`)
  }
}

/** The event that moves `from` to `to`, or an IllegalTransitionError if the table has none. */
export function eventFor(from: BatchStatus, to: BatchStatus): BatchEvent {
  for (const [event, t] of Object.entries(BATCH_TRANSITIONS)) {
    if (t.from === from && t.to === to) return event as BatchEvent
  }
  throw new IllegalTransitionError(from, to)
}

type BatchChanges = Partial<Omit<BatchRow, 'seq' | 'id' | 'status' | 'updated_at'>>

/**
 * Moves one batch along one edge of the table in one guarded statement (STYLE example 7):
 * `UPDATE … WHERE id = ? AND status = <from>`. Returns the updated row, or null when the batch was
 * not in `from` (a stale caller changes nothing). Run it inside writeTx with whatever else must
 * change atomically (assignment rows, counters).
 */
export function transition(
  tx: Tx,
  batchId: string,
  event: BatchEvent,
  now: number,
  changes: BatchChanges = {},
  reason?: string,
): BatchRow | null {
  const { from, to } = BATCH_TRANSITIONS[event]
  const keys = (Object.keys(changes) as (keyof BatchChanges)[]).filter((k) => changes[k] !== undefined).sort()
  const row = guardedUpdate(tx, event, keys).get({ ...changes, __id: batchId, __now: now })
  if (row) log.info('batch transition', { batch_id: batchId, from, to, event, ...(reason ? { reason } : {}) })
  return row ?? null
}

// The guarded UPDATE of each (event, changed columns) shape is prepared once per connection:
// compiling it on every call cost more than running it (sweeper passes requeue in bulk).
const prepared = new WeakMap<object, Map<string, ReturnType<typeof prepareUpdate>>>()
function prepareUpdate(tx: Tx, event: BatchEvent, keys: (keyof BatchChanges)[]) {
  const { from, to } = BATCH_TRANSITIONS[event]
  const set = Object.fromEntries(keys.map((k) => [k, sql.placeholder(k)]))
  return tx
    .update(batches)
    .set({ ...set, status: to, updated_at: sql.placeholder('__now') as never })
    .where(and(eq(batches.id, sql.placeholder('__id')), eq(batches.status, from)))
    .returning()
    .prepare()
}
function guardedUpdate(tx: Tx, event: BatchEvent, keys: (keyof BatchChanges)[]) {
  const session = (tx as unknown as { session: object }).session
  let cache = prepared.get(session)
  if (!cache) {
    cache = new Map()
    prepared.set(session, cache)
  }
  const shape = `${event}:${keys.join(',')}`
  let stmt = cache.get(shape)
  if (!stmt) {
    stmt = prepareUpdate(tx, event, keys)
    cache.set(shape, stmt)
  }
  return stmt
}

/** transition() by target state: refuses (throws) any pair that is not an edge of the table. */
export function moveBatch(
  tx: Tx,
  batch: Pick<BatchRow, 'id' | 'status'>,
  to: BatchStatus,
  now: number,
  changes?: BatchChanges,
  reason?: string,
): BatchRow | null {
  return transition(tx, batch.id, eventFor(batch.status, to), now, changes, reason)
}

export const isTerminal = (s: BatchStatus) => s === 'completed' || s === 'failed'
