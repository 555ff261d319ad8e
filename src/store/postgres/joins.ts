import { and, eq, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import { joinTaken } from '../../domain/shards'
import type { QueueStore } from '../queue'
import type { PgDb, PgTx } from './db'
import { takeParts } from './shards'
import { transition } from './transition'

// The join of a split batch's shards on PostgreSQL (docs/api.md §16): any instance's upload or
// sweeper may try it at once. The lease row (batch_joins) is taken, renewed, fenced and dropped by
// guarded statements (ARCHITECTURE.md rules 7 and 14); whether it may be taken is
// domain/shards.ts joinTaken. Taking and completing lock the batch's row, then the lease's, always
// in that order.

const { batchJoins, files } = schema

/** Takes turns on a batch's join: its row, then its lease row (either may be gone). */
async function lockJoin(tx: PgTx, batchId: string) {
  await tx.execute(sql`SELECT FROM batches WHERE id = ${batchId} FOR UPDATE`)
  const [lease] = await tx.select().from(batchJoins).where(eq(batchJoins.batch_id, batchId)).for('update')
  return lease ?? null
}

const held = (batchId: string, joiner: string) =>
  and(eq(batchJoins.batch_id, batchId), eq(batchJoins.joiner, joiner))

export function postgresJoins(
  db: PgDb,
): Pick<QueueStore, 'takeJoin' | 'renewJoin' | 'completeSplit' | 'endJoin' | 'joinsDue'> {
  return {
    async takeJoin(r) {
      return db.transaction(async (tx) => {
        const lease = await lockJoin(tx, r.batchId)
        // In progress, every request cut into a shard, every shard done.
        const [{ ready }] = (await tx.execute(sql`
          SELECT EXISTS (SELECT FROM batches WHERE id = ${r.batchId} AND split AND status = 'in_progress'
            AND next_request >= request_counts_total
            AND NOT EXISTS (SELECT FROM batch_shards s WHERE s.batch_id = ${r.batchId} AND s.status <> 'done'))
            AS ready`)) as unknown as [{ ready: boolean }]
        const taken = joinTaken(lease, ready, r.files, r.now)
        if (taken) {
          const row = { joiner: r.joiner, lease_until: r.until, blobs: taken.blobs }
          await tx
            .insert(batchJoins)
            .values({ batch_id: r.batchId, ...row })
            .onConflictDoUpdate({ target: batchJoins.batch_id, set: row })
        }
        return taken
      })
    },

    async renewJoin(r) {
      const rows = await db
        .update(batchJoins)
        .set({ lease_until: r.until })
        .where(held(r.batchId, r.joiner))
        .returning({ id: batchJoins.batch_id })
      return rows.length === 1
    },

    async completeSplit(r) {
      return db.transaction(async (tx) => {
        await lockJoin(tx, r.batchId)
        // Fenced: only the lease's joiner completes the batch.
        const fenced = await tx
          .update(batchJoins)
          .set({ lease_until: r.until })
          .where(held(r.batchId, r.joiner))
          .returning({ id: batchJoins.batch_id })
        if (fenced.length !== 1) return null
        const batch = await transition(tx, r.batchId, 'results_delivered', r.now, r.changes, 'shards joined')
        if (!batch) return null
        if (r.files.length) await tx.insert(files).values(r.files)
        // The joined files are the batch's now; the parts are what the lease leaves to remove.
        const parts = await takeParts(tx, r.batchId)
        await tx.update(batchJoins).set({ blobs: parts }).where(held(r.batchId, r.joiner))
        return { batch, parts }
      })
    },

    async endJoin(batchId, joiner) {
      await db.delete(batchJoins).where(held(batchId, joiner))
    },

    async joinsDue(now) {
      const rows = (await db.$client`
        SELECT id FROM batches WHERE split AND status = 'in_progress' AND next_request >= request_counts_total
          AND NOT EXISTS (SELECT FROM batch_shards s WHERE s.batch_id = batches.id AND s.status <> 'done')
          AND NOT EXISTS (SELECT FROM batch_joins j WHERE j.batch_id = batches.id AND j.lease_until > ${now})
        UNION SELECT batch_id FROM batch_joins WHERE lease_until <= ${now}`) as { id: string }[]
      return rows.map((r) => r.id)
    },
  }
}
