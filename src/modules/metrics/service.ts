import { createHash, timingSafeEqual } from 'node:crypto'
import type { Deps } from '../../deps'
import { BATCH_STATUSES } from '../../domain/batch-states'
import { unauthorized } from '../../lib/errors'
import { onlineCutoff } from '../workers/liveness'

// GET /metrics (docs/api.md §10): Prometheus text. Counters are incremented where things happen; the
// gauges describing stored state are computed here, at scrape time, from the database.

const WORKER_STATUSES = ['online', 'offline'] as const
const ACTIVITIES = ['idle', 'busy', 'downloading_model'] as const
const FILE_PURPOSES = ['batch', 'batch_output'] as const

/** METRICS_TOKEN set → `Authorization: Bearer <token>` required, compared in constant time. */
export function checkMetricsToken(deps: Deps, authorization: string | null) {
  const expected = deps.config.METRICS_TOKEN
  if (expected === undefined) return
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')
  if (!match) throw unauthorized('missing_credential', 'This endpoint requires Bearer <METRICS_TOKEN>')
  // Equal-length digests, so neither the content nor the length of the token leaks through timing.
  const digest = (s: string) => createHash('sha256').update(s).digest()
  if (!timingSafeEqual(digest(match[1]!), digest(expected))) {
    throw unauthorized('invalid_metrics_token', 'The metrics token is not valid')
  }
}

export async function renderMetrics(deps: Deps): Promise<{ body: string; contentType: string }> {
  await refreshStateGauges(deps)
  const { registry } = deps.metrics
  return { body: await registry.metrics(), contentType: registry.contentType }
}

/**
 * Every label combination is set on every scrape (0 included), so a series never vanishes when
 * its count drops to zero.
 */
export async function refreshStateGauges(deps: Deps) {
  const batchCounts = new Map((await deps.store.fleet.batchCounts()).map((r) => [r.status, r.n]))
  for (const status of BATCH_STATUSES) deps.metrics.batches.set({ status }, batchCounts.get(status) ?? 0)
  const queued = await deps.store.queue.queuedByOwnerClass()
  for (const owner_class of ['idle', 'running'] as const)
    deps.metrics.queuedBatches.set({ owner_class }, queued[owner_class])
  const shards = await deps.store.queue.shardStates()
  for (const state of ['waiting', 'running', 'done'] as const)
    deps.metrics.shards.set({ state }, shards[state])

  // docs/api.md §7: online only if stored online AND seen within HEARTBEAT_TIMEOUT_SECONDS (read time),
  // with the one cutoff (workers/liveness.ts), like pool capacity and the listings.
  const workerCounts = new Map(
    (await deps.store.fleet.workerCounts(onlineCutoff(deps))).map((r) => [`${r.status}/${r.activity}`, r.n]),
  )
  for (const status of WORKER_STATUSES)
    for (const activity of ACTIVITIES)
      deps.metrics.workers.set({ status, activity }, workerCounts.get(`${status}/${activity}`) ?? 0)

  const stored = new Map((await deps.store.files.storedBytesByPurpose()).map((r) => [r.purpose, r.bytes]))
  for (const purpose of FILE_PURPOSES) deps.metrics.storedBytes.set({ purpose }, stored.get(purpose) ?? 0)
}
