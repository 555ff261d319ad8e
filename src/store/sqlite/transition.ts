import { and, eq, sql } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { preparedOnce } from '../../db/prepared'
import { type BatchRow, batches } from '../../db/schema'
import { BATCH_TRANSITIONS, type BatchChanges, type BatchEvent } from '../../domain/batch-states'
import { log } from '../../lib/logger'
import { enqueueWebhookEvents } from './webhooks'

/**
 * SQLite: moves one batch along one edge of the table in one guarded statement (ARCHITECTURE.md rule 7):
 * `UPDATE … WHERE id = ? AND status = <from>`. Returns the updated row, or null when the batch was
 * not in `from` (a stale caller changes nothing). Run it inside writeTx with whatever else must
 * change atomically (assignment rows, counters); the statements are prepared on the one
 * connection, so they run inside the caller's transaction.
 */
export function transition(
  deps: { db: Db },
  batchId: string,
  event: BatchEvent,
  now: number,
  changes: BatchChanges = {},
  reason?: string,
): BatchRow | null {
  const { from, to } = BATCH_TRANSITIONS[event]
  const keys = (Object.keys(changes) as (keyof BatchChanges)[]).filter((k) => changes[k] !== undefined).sort()
  const row = guardedUpdate(deps, event, keys).get({ ...changes, __id: batchId, __now: now })
  if (row) log.info('batch transition', { batch_id: batchId, from, to, event, ...(reason ? { reason } : {}) })
  // docs/api.md §13: the owner's webhook events are written in this same transaction (the outbox).
  if (row) enqueueWebhookEvents(deps, row, event, now)
  return row ?? null
}

// The guarded UPDATE of each (event, changed columns) shape is prepared once per database:
// compiling it on every call cost more than running it (sweeper passes requeue in bulk).
const updateShapes = preparedOnce(() => new Map<string, ReturnType<typeof prepareUpdate>>())
function prepareUpdate(db: Db, event: BatchEvent, keys: (keyof BatchChanges)[]) {
  const { from, to } = BATCH_TRANSITIONS[event]
  const set = Object.fromEntries(keys.map((k) => [k, sql.placeholder(k)]))
  return db
    .update(batches)
    .set({ ...set, status: to, updated_at: sql.placeholder('__now') as never })
    .where(and(eq(batches.id, sql.placeholder('__id')), eq(batches.status, from)))
    .returning()
    .prepare()
}
function guardedUpdate(deps: { db: Db }, event: BatchEvent, keys: (keyof BatchChanges)[]) {
  const shapes = updateShapes(deps)
  const shape = `${event}:${keys.join(',')}`
  let stmt = shapes.get(shape)
  if (!stmt) {
    stmt = prepareUpdate(deps.db, event, keys)
    shapes.set(shape, stmt)
  }
  return stmt
}
