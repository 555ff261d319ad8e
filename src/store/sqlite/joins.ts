import type { Db } from '../../db/open'
import { preparedOnce } from '../../db/prepared'
import { files } from '../../db/schema'
import { writeTx } from '../../db/tx'
import { joinTaken } from '../../domain/shards'
import type { QueueStore } from '../queue'
import type { SqliteDeps } from './deps'
import { takePartsInTx } from './shards'
import { transition } from './transition'

// The join of a split batch's shards on SQLite (docs/api.md §16): one process, but an upload's join
// and the sweeper's can still run at once, and a process that dies mid-join leaves its blobs. The
// lease row (batch_joins) is taken, renewed, fenced and dropped by guarded statements, as on
// PostgreSQL; whether it may be taken is domain/shards.ts joinTaken.

const stmts = preparedOnce((db: Db) => ({
  lease: db.$client.prepare<{ joiner: string; lease_until: number; blobs: string }, { id: string }>(
    'SELECT joiner, lease_until, blobs FROM batch_joins WHERE batch_id = $id',
  ),
  // In progress, every request cut into a shard, every shard done.
  ready: db.$client.prepare<{ ready: number }, { id: string }>(
    `SELECT EXISTS (SELECT 1 FROM batches WHERE id = $id AND split = 1 AND status = 'in_progress'
       AND next_request >= request_counts_total
       AND NOT EXISTS (SELECT 1 FROM batch_shards s WHERE s.batch_id = $id AND s.status != 'done')) AS ready`,
  ),
  take: db.$client.prepare<unknown, { id: string; joiner: string; until: number; blobs: string }>(
    `INSERT INTO batch_joins (batch_id, joiner, lease_until, blobs) VALUES ($id, $joiner, $until, $blobs)
     ON CONFLICT (batch_id) DO UPDATE SET joiner = excluded.joiner, lease_until = excluded.lease_until,
       blobs = excluded.blobs`,
  ),
  renew: db.$client.prepare<unknown, { id: string; joiner: string; until: number }>(
    'UPDATE batch_joins SET lease_until = $until WHERE batch_id = $id AND joiner = $joiner',
  ),
  leftToRemove: db.$client.prepare<unknown, { id: string; joiner: string; blobs: string }>(
    'UPDATE batch_joins SET blobs = $blobs WHERE batch_id = $id AND joiner = $joiner',
  ),
  end: db.$client.prepare<unknown, { id: string; joiner: string }>(
    'DELETE FROM batch_joins WHERE batch_id = $id AND joiner = $joiner',
  ),
  due: db.$client.prepare<{ id: string }, { now: number }>(
    `SELECT id FROM batches WHERE split = 1 AND status = 'in_progress'
       AND next_request >= request_counts_total
       AND NOT EXISTS (SELECT 1 FROM batch_shards s WHERE s.batch_id = batches.id AND s.status != 'done')
       AND NOT EXISTS (SELECT 1 FROM batch_joins j WHERE j.batch_id = batches.id AND j.lease_until > $now)
     UNION SELECT batch_id FROM batch_joins WHERE lease_until <= $now`,
  ),
}))

export function sqliteJoins(
  deps: SqliteDeps,
): Pick<QueueStore, 'takeJoin' | 'renewJoin' | 'completeSplit' | 'endJoin' | 'joinsDue'> {
  const { db } = deps
  return {
    async takeJoin(r) {
      const s = stmts(deps)
      return writeTx(db, () => {
        const row = s.lease.get({ id: r.batchId })
        const lease = row && { ...row, blobs: JSON.parse(row.blobs) as string[] }
        const taken = joinTaken(lease, s.ready.get({ id: r.batchId })!.ready === 1, r.files, r.now)
        if (taken)
          s.take.run({ id: r.batchId, joiner: r.joiner, until: r.until, blobs: JSON.stringify(taken.blobs) })
        return taken
      })
    },

    async renewJoin(r) {
      return stmts(deps).renew.run({ id: r.batchId, joiner: r.joiner, until: r.until }).changes === 1
    },

    async completeSplit(r) {
      const s = stmts(deps)
      return writeTx(db, (tx) => {
        // Fenced: only the lease's joiner completes the batch.
        if (s.renew.run({ id: r.batchId, joiner: r.joiner, until: r.until }).changes !== 1) return null
        const batch = transition(deps, r.batchId, 'results_delivered', r.now, r.changes, 'shards joined')
        if (!batch) return null
        if (r.files.length) tx.insert(files).values(r.files).run()
        // The joined files are the batch's now; the parts are what the lease leaves to remove.
        const parts = takePartsInTx(deps, r.batchId)
        s.leftToRemove.run({ id: r.batchId, joiner: r.joiner, blobs: JSON.stringify(parts) })
        return { batch, parts }
      })
    },

    async endJoin(batchId, joiner) {
      stmts(deps).end.run({ id: batchId, joiner })
    },

    async joinsDue(now) {
      return stmts(deps)
        .due.all({ now })
        .map((r) => r.id)
    },
  }
}
