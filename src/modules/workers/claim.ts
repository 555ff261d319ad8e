import { and, asc, eq, isNull, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import { batchAssignments, batches } from '../../db/schema'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { newId } from '../../lib/ids'
import type { WorkerPrincipal } from '../auth/credentials'
import { transition } from '../batches/states'
import { isOnline, loadCatalogue, loadWorkerView, type Match, matchesFor } from './matching'
import { ownWorker } from './service'

// POST /workers/poll (SPEC §4 Poll, API.md §7). The worker's servable entries are computed first
// (catalogue-sized work); then, inside one BEGIN IMMEDIATE transaction, the oldest validated batch
// of each servable slug is one probe of the (status, model, seq) index, so the cost of a poll does
// not grow with the queue. UNIQUE(batch_assignments.batch_id) backs the guarantee at the storage
// level: two pollers can never hold the same batch.

export interface Job {
  job_id: string
  assignment_id: string
  input_file_id: string
  input_path: string
  model: string
  catalogue_id: string
  endpoint: string
  runtime: string
  digest: string | null
  params: Record<string, unknown>
  total_requests: number
}

function prepare(db: Deps['db']) {
  return {
    activeCount: db
      .select({ n: sql<number>`count(*)` })
      .from(batchAssignments)
      .where(
        and(
          eq(batchAssignments.worker_id, sql.placeholder('worker_id')),
          isNull(batchAssignments.completed_at),
        ),
      )
      .prepare(),
    oldestValidated: db
      .select({ id: batches.id, seq: batches.seq })
      .from(batches)
      .where(and(eq(batches.status, 'validated'), eq(batches.model, sql.placeholder('model'))))
      .orderBy(asc(batches.seq))
      .limit(1)
      .prepare(),
    insertAssignment: db
      .insert(batchAssignments)
      .values({
        id: sql.placeholder('id') as never,
        batch_id: sql.placeholder('batch_id') as never,
        worker_id: sql.placeholder('worker_id') as never,
        org_id: sql.placeholder('org_id') as never,
        assigned_at: sql.placeholder('now') as never,
      })
      .prepare(),
  }
}
const stmts = preparedOnce(prepare)

export function claimBatch(deps: Deps, principal: WorkerPrincipal, workerId: string): { job: Job | null } {
  const worker = ownWorker(deps, principal, workerId)
  // A worker the sweeper would call silent gets no new work until it heartbeats again.
  if (!isOnline(deps, worker)) return { job: null }
  const catalogue = loadCatalogue(deps)
  // SPEC Poll rule 1 (and §2 rule 5): stored batches may carry an entry's retired slug.
  const candidates = matchesFor(loadWorkerView(deps, worker), catalogue).flatMap((match) =>
    catalogue.slugsOf(match.entry).map((model) => ({ model, match })),
  )
  if (candidates.length === 0) return { job: null }
  const s = stmts(deps)
  const now = deps.clock.now()

  const job = writeTx(deps.db, (tx) => {
    if (s.activeCount.get({ worker_id: workerId })!.n >= worker.max_concurrent_jobs) return null
    // SPEC Poll rule 5: loaded models first; then oldest first.
    let best: { id: string; seq: number; match: Match } | null = null
    for (const { model, match } of candidates) {
      const b = s.oldestValidated.get({ model })
      if (!b) continue
      const better =
        !best ||
        (match.loaded && !best.match.loaded) ||
        (match.loaded === best.match.loaded && b.seq < best.seq)
      if (better) best = { ...b, match }
    }
    if (!best) return null
    const batch = transition(tx, best.id, 'claimed', now, { in_progress_at: now }, `worker ${workerId}`)
    if (!batch) return null
    const assignmentId = newId('asg_')
    s.insertAssignment.run({
      id: assignmentId,
      batch_id: batch.id,
      worker_id: workerId,
      org_id: worker.org_id,
      now,
    })
    const { entry, profile } = best.match
    return {
      job_id: batch.id,
      assignment_id: assignmentId,
      input_file_id: batch.input_file_id,
      input_path: `/v1/files/${batch.input_file_id}/content`,
      // API.md §7: the matched serving profile's runtime string, not the catalogue slug.
      model: profile.runtime_model_id,
      catalogue_id: entry.id,
      endpoint: batch.endpoint,
      runtime: profile.runtime,
      digest: entry.digest,
      params: profile.params,
      total_requests: batch.request_counts_total,
    }
  })
  if (job) deps.metrics.claims.inc()
  return { job }
}
