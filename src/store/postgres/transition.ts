import { and, eq, getTableColumns, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { BatchRow } from '../../db/schema'
import { BATCH_TRANSITIONS, type BatchChanges, type BatchEvent } from '../../domain/batch-states'
import { log } from '../../lib/logger'
import type { PgTx } from './db'
import { enqueueWebhookEvents } from './webhooks'

// The state table's edges applied on PostgreSQL (ARCHITECTURE.md rule 7), apart from the queue so
// that the queue and the shards both use them without importing each other.

const { batches } = schema

/** The state table's guarded UPDATE (ARCHITECTURE.md rule 7), in PostgreSQL: null when not in `from`. */
export async function transition(
  tx: PgTx,
  batchId: string,
  event: BatchEvent,
  now: number,
  changes: BatchChanges,
  reason: string,
): Promise<BatchRow | null> {
  const { from, to } = BATCH_TRANSITIONS[event]
  const [row] = await tx
    .update(batches)
    .set({ ...(changes as object), status: to, updated_at: now })
    .where(and(eq(batches.id, batchId), eq(batches.status, from)))
    .returning()
  if (row) log.info('batch transition', { batch_id: batchId, from, to, event, reason })
  // docs/api.md §13: the owner's webhook events are written in this same transaction (the outbox).
  if (row) await enqueueWebhookEvents(tx, [{ batch: row as BatchRow, event }], now)
  return (row as BatchRow | undefined) ?? null
}

/** One batch's move for transitionEach. */
export interface Move {
  batchId: string
  event: BatchEvent
  changes: BatchChanges
}

/**
 * transition() for several batches in one UPDATE, each along its own edge with its own changes:
 * the answers, in the order of `moves`, are the moved rows or null (not in the edge's `from`).
 */
export async function transitionEach(tx: PgTx, moves: Move[], now: number, reason: string) {
  if (moves.length === 0) return []
  const columns = getTableColumns(batches)
  const keys = [
    ...new Set(
      moves.flatMap((m) =>
        (Object.keys(m.changes) as (keyof BatchChanges)[]).filter((k) => m.changes[k] !== undefined),
      ),
    ),
  ]
  // Each row of the VALUES list: the id, the edge, and per changed column whether this move sets
  // it and to what (typed, so a NULL is a NULL of the column's type).
  const values = moves.map((m) => {
    const { from, to } = BATCH_TRANSITIONS[m.event]
    const cells = keys.map((k) => {
      const set = m.changes[k] !== undefined
      return sql`, ${set}::boolean, ${set ? m.changes[k] : null}::${sql.raw(columns[k].getSQLType())}`
    })
    return sql`(${m.batchId}, ${from}, ${to}${sql.join(cells)})`
  })
  const names = keys.map((k) => sql`, ${sql.identifier(`set_${k}`)}, ${sql.identifier(k)}`)
  const sets = keys.map(
    (k) =>
      sql`, ${sql.identifier(columns[k].name)} = CASE WHEN v.${sql.identifier(`set_${k}`)} THEN v.${sql.identifier(k)} ELSE b.${sql.identifier(columns[k].name)} END`,
  )
  const raw = (await tx.execute(sql`
    UPDATE batches AS b SET status = v.to_status, updated_at = ${now}${sql.join(sets)}
    FROM (VALUES ${sql.join(values, sql`, `)}) AS v(id, from_status, to_status${sql.join(names)})
    WHERE b.id = v.id AND b.status = v.from_status
    RETURNING b.*`)) as unknown as Record<string, unknown>[]
  const byId = new Map(raw.map((r) => [r.id as string, batchRow(r)]))
  const moved = moves.map((m) => byId.get(m.batchId) ?? null)
  for (const [i, row] of moved.entries()) {
    if (!row) continue
    const { from, to } = BATCH_TRANSITIONS[moves[i]!.event]
    log.info('batch transition', { batch_id: row.id, from, to, event: moves[i]!.event, reason })
  }
  // docs/api.md §13: the owners' webhook events are written in this same transaction (the outbox).
  await enqueueWebhookEvents(
    tx,
    moved.flatMap((batch, i) => (batch ? [{ batch, event: moves[i]!.event }] : [])),
    now,
  )
  return moved
}

/** Bun's client returns bigint columns as strings; drizzle's schema says which are numbers. */
const bigintColumns = Object.entries(getTableColumns(batches))
  .filter(([, c]) => c.columnType === 'PgBigInt53' || c.columnType === 'PgBigSerial53')
  .map(([name]) => name)
export function batchRow(raw: Record<string, unknown>): BatchRow {
  for (const name of bigintColumns) if (raw[name] !== null) raw[name] = Number(raw[name])
  return raw as unknown as BatchRow
}
