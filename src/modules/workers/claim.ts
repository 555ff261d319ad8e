import type { Deps } from '../../deps'
import type { WorkerPrincipal } from '../auth/credentials'
import { isOnline } from './liveness'
import { loadCatalogue, matchesFor, workerView } from './matching'
import { ownWorkerWithHosting } from './service'

// POST /workers/poll (SPEC §4 Poll, API.md §7). The worker's servable entries are computed here,
// by the one matching predicate (catalogue-sized work); the storage engine then claims the oldest
// validated batch of those models atomically (src/store). UNIQUE(batch_assignments.batch_id)
// backs the guarantee at the storage level: two pollers can never hold the same batch.

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

export async function claimBatch(
  deps: Deps,
  principal: WorkerPrincipal,
  workerId: string,
): Promise<{ job: Job | null }> {
  // The worker's row and what it hosts are one read (one statement on PostgreSQL); the hosting
  // read is thrown away when the worker is not the key's.
  const [{ worker, hosting }, catalogue] = await Promise.all([
    ownWorkerWithHosting(deps, principal, workerId),
    loadCatalogue(deps),
  ])
  // A worker the sweeper would call silent gets no new work until it heartbeats again.
  if (!isOnline(deps, worker)) return { job: null }
  // SPEC Poll rule 1 (and §2 rule 5): stored batches may carry an entry's retired slug.
  const candidates = matchesFor(workerView(worker, hosting), catalogue).flatMap((match) =>
    catalogue.slugsOf(match.entry).map((model) => ({ model, loaded: match.loaded, match })),
  )
  if (candidates.length === 0) return { job: null }
  const claimed = await deps.store.queue.claim({
    workerId,
    orgId: worker.org_id,
    maxConcurrent: worker.max_concurrent_jobs,
    candidates,
    now: deps.clock.now(),
  })
  if (!claimed) return { job: null }
  deps.metrics.claims.inc()
  const { batch, assignmentId } = claimed
  const { entry, profile } = claimed.match
  return {
    job: {
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
    },
  }
}
