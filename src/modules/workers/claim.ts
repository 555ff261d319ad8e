import type { WorkerRow } from '../../db/schema'
import type { Deps } from '../../deps'
import { needsOf } from '../../domain/capabilities'
import { copyPays } from '../../domain/placement'
import type { WorkerPrincipal } from '../../domain/principal'
import { isOnline, onlineCutoff } from './liveness'
import { workerMatches } from './match-cache'
import { placementFor } from './placement'
import type { PollState } from './waiters'
import { batchClaimable } from './waiters'

// POST /workers/poll (docs/api.md §7 Poll rules, docs/api.md §7). The worker's servable entries are computed here,
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
  /** (ext) The entry's VRAM need, the daemon's load budget (docs/worker.md). */
  vram_gb: number | null
  total_requests: number
  /** docs/api.md §16: the batch a shard job belongs to (a shard's job_id is its own). */
  batch_id?: string
  shard?: { index: number; first_request: number; requests: number }
  /** docs/api.md §16: a backup copy of a shard another worker holds (its own assignment_id). */
  backup?: true
  /**
   * docs/api.md §7 placement rule 5: claimed for a spare GPU, of a model the worker is busy with
   * whose waiting work pays for one more copy of it there.
   */
  copy?: true
}

/**
 * docs/api.md §7 placement (ext): what a poll says of its worker now — a GPU holding no model in use
 * (`spare_gpu`), the models loaded on it (`loaded_models`) and those a job uses (`models_in_use`);
 * null: not said.
 */
export interface PollHints {
  spare: boolean
  loaded: readonly string[] | null
  inUse: readonly string[] | null
  /** docs/api.md §7 `failed_models`: the models it will not load now (failed there a moment ago). */
  failed: readonly string[]
}

export const NO_HINTS: PollHints = { spare: false, loaded: null, inUse: null, failed: [] }

export async function claimBatch(
  deps: Deps & PollState,
  principal: WorkerPrincipal,
  workerId: string,
  hints: PollHints = NO_HINTS,
): Promise<{ job: Job | null; worker: WorkerRow }> {
  // docs/api.md §16: only a worker that declared shards is handed them (split batches among them).
  const takesShards = (shards: boolean) => shards && deps.config.SHARD_MAX_REQUESTS > 0
  // The worker's row, and what it can serve as this server keeps it while the row says it holds;
  // the waiting heads of that, read with the row when they can be.
  const { worker, catalogue, matches, servable, heads } = await workerMatches(
    deps,
    principal,
    workerId,
    (shards) => !takesShards(shards),
  )
  // A worker the sweeper would call silent gets no new work until it heartbeats again.
  if (!isOnline(deps, worker)) return { job: null, worker }
  if (matches.length === 0) return { job: null, worker }
  const placed = await placementFor(
    deps,
    worker,
    matches.map((m) => m.entry),
    catalogue,
    (id) => deps.pollWaiters.isPolling(id),
  )
  const placement = placed && hints.spare ? { ...placed.placement, spare: true } : placed?.placement
  // docs/api.md §7 placement: a worker that loads models is on the models of the work it holds;
  // holding none, on those loaded or being loaded (a heartbeat may lag behind its last claim).
  const loading = new Set(placement ? worker.loading_models : [])
  const held = placed?.held ?? new Set<string>()
  // What the poll says is loaded now, and in use (it cannot lag a claim as a heartbeat's list may;
  // a job uploading its results holds work but no GPU).
  const fresh = placement && hints.loaded ? new Set(hints.loaded) : null
  const inUse = placement && hints.inUse ? new Set(hints.inUse) : null
  // docs/api.md §7 failed_models: a model the worker will not load now is not claimed for it; its
  // batches wait for another worker (or for this one once it tries the model again).
  const failed = new Set(hints.failed)
  const candidates = servable
    .filter((s) => !s.names.some((n) => failed.has(n)))
    .map((s) => ({
      model: s.model,
      match: s.match,
      names: s.names,
      needs: s.needs,
      key: s.key,
      loaded: fresh
        ? s.slugs.some((m) => held.has(m)) || s.names.some((n) => fresh.has(n))
        : held.size
          ? s.slugs.some((m) => held.has(m))
          : s.match.loaded || s.names.some((n) => loading.has(n)),
      busy: inUse ? s.names.some((n) => inUse.has(n)) : s.slugs.some((m) => held.has(m)),
    }))
  const claimed = await deps.store.queue.claim({
    workerId,
    orgId: worker.org_id,
    maxConcurrent: worker.max_concurrent_jobs,
    candidates,
    now: deps.clock.now(),
    shards: takesShards(worker.shards)
      ? {
          bounds: { min: deps.config.SHARD_MIN_REQUESTS, max: deps.config.SHARD_MAX_REQUESTS },
          cutoff: onlineCutoff(deps),
          backups: deps.config.SHARD_BACKUPS,
        }
      : undefined,
    placement,
    heads,
  })
  if (!claimed) return { job: null, worker }
  deps.metrics.claims.inc()
  const { batch, assignmentId, shard, backup } = claimed
  // docs/api.md §7 placement: the worker is on this model now; a backup copy takes no waiting work.
  deps.placement.claimed(
    workerId,
    batch.model!,
    backup ? 0 : shard ? shard.requests : batch.request_counts_total,
  )
  const { entry, profile } = claimed.match
  const copy =
    placement?.spare === true &&
    candidates.some((c) => c.key === entry.id && c.busy) &&
    copyPays(placement, entry.id)
  if (shard) {
    if (backup) deps.metrics.shardBackups.inc({ outcome: 'started' })
    else deps.metrics.shardClaims.inc()
    // docs/api.md §16: the rest of the batch is for the other workers — the next shards, or once all
    // are held, backup copies of the running ones: their held polls look again.
    batchClaimable(deps, batch.id, batch.model, needsOf(batch.needs))
  }
  return {
    job: {
      job_id: shard ? shard.id : batch.id,
      assignment_id: assignmentId,
      input_file_id: batch.input_file_id,
      // docs/api.md §16: a shard's input path serves exactly its lines; docs/api.md §7 input_path: a
      // whole batch in an order of its own is served in that order to a worker that declared
      // shards, and any other (an older daemon, a third-party worker) gets the plain path and
      // runs the file order.
      input_path: shard
        ? `/v1/files/${batch.input_file_id}/content?shard=${shard.id}`
        : batch.ordered && worker.shards
          ? `/v1/files/${batch.input_file_id}/content?batch=${batch.id}`
          : `/v1/files/${batch.input_file_id}/content`,
      // docs/api.md §7: the matched serving profile's runtime string, not the catalogue slug.
      model: profile.runtime_model_id,
      catalogue_id: entry.id,
      endpoint: batch.endpoint,
      runtime: profile.runtime,
      digest: entry.digest,
      params: profile.params,
      vram_gb: entry.vram_gb,
      total_requests: shard ? shard.requests : batch.request_counts_total,
      ...(shard && {
        batch_id: batch.id,
        shard: { index: shard.shard_index, first_request: shard.first_request, requests: shard.requests },
      }),
      ...(backup && { backup: true as const }),
      ...(copy && { copy: true as const }),
    },
    worker,
  }
}
