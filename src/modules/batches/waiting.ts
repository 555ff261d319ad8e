import type { BatchRow } from '../../db/schema'
import type { Deps } from '../../deps'
import { needsOf } from '../../domain/capabilities'
import { type CatalogueEntry, lacking, workerView } from '../../domain/matching'
import type { UserPrincipal } from '../../domain/principal'
import { type Viewer, type Waiting, type WaitingHost, waitingReason } from '../../domain/waiting'
import type { PullFailureWithWorker, PullWithWorker } from '../../store/fleet'
import { isOnline } from '../workers/liveness'
import { loadCatalogue } from '../workers/matching'
import { pullLapsed } from '../workers/pulls'

// docs/api.md §6 `waiting`: the facts the rule (src/domain/waiting.ts) decides from, read once for
// every batch a request shows — the catalogue (kept in memory), the workers hosting the models of
// those batches, the models' download asks and failed downloads, and each batch's place in the queue (one index-only
// range per batch, never a scan of the queue) — then decided per batch and per reader.

/** Who reads: a superadmin sees every worker's name; anyone else, those of their own orgs. */
export async function viewerOf(deps: Deps, principal: UserPrincipal): Promise<Viewer> {
  if (principal.user.platform_role === 'superadmin') return { superadmin: true, orgIds: new Set() }
  return { superadmin: false, orgIds: new Set(await deps.store.fleet.orgIdsOf(principal.user.id)) }
}

/** Decides `waiting` for one of the rows it was read for, for one reader. */
export type WaitingOf = (row: BatchRow, viewer: Viewer) => Waiting | null

const waits = (row: BatchRow): row is BatchRow & { model: string } =>
  row.status === 'validated' && row.model !== null

/** Reads what `waiting` needs for `rows` (nothing when none is validated). */
export async function readWaiting(deps: Deps, rows: readonly BatchRow[]): Promise<WaitingOf> {
  const waiting = rows.filter(waits)
  if (waiting.length === 0) return () => null
  const catalogue = await loadCatalogue(deps)
  const entries = new Map<string, CatalogueEntry | undefined>()
  for (const row of waiting) entries.set(row.model, catalogue.resolve(row.model))
  const known = [...new Set(entries.values())].filter((e): e is CatalogueEntry => e?.enabled === true)
  const names = [...new Set(known.flatMap((e) => e.profiles.map((p) => p.runtime_model_id)))]
  const [hosts, pulls, failures, queue] = await Promise.all([
    deps.store.fleet.hostsNamed(names),
    deps.store.fleet.pullsFor(known.map((e) => e.id)),
    deps.store.fleet.pullFailuresFor(known.map((e) => e.id)),
    deps.store.batches.queueTallies(
      waiting.flatMap((row) => {
        const entry = entries.get(row.model)
        return entry?.enabled ? [{ batchId: row.id, seq: row.seq, models: catalogue.slugsOf(entry) }] : []
      }),
    ),
  ])
  const now = deps.clock.now()
  const facts: WaitingHost[] = hosts.map(({ worker, hosting }) => ({
    view: workerView(worker, hosting),
    name: worker.name,
    online: isOnline(deps, worker),
    loading: worker.loading_models,
    loadFailures: worker.load_failures.filter((f) => f.retry_at > now),
    shards: worker.shards,
    // Per batch, below: what it needs and this worker lacks.
    lacks: [],
  }))
  // Each entry's hosts, by name (the rule judges the rest).
  const hostsOf = new Map(
    known.map((e) => {
      const own = new Set(e.profiles.map((p) => p.runtime_model_id))
      return [e.id, facts.filter((h) => h.view.models.some((m) => own.has(m.name)))]
    }),
  )
  const pullOf = new Map<string, PullWithWorker>(pulls.map((p) => [p.pull.catalog_id, p]))
  // Each entry's latest failed download whose worker still backs off (docs/api.md §7 model-progress).
  const failureOf = new Map<string, PullFailureWithWorker>()
  for (const f of failures) {
    if (f.failure.retry_at <= now) continue
    const seen = failureOf.get(f.failure.catalog_id)
    if (!seen || seen.failure.failed_at < f.failure.failed_at) failureOf.set(f.failure.catalog_id, f)
  }
  const none = { batches: 0, requests: 0 }
  return (row, viewer) => {
    if (!waits(row) || !entries.has(row.model)) return null
    const entry = entries.get(row.model)
    const pull = entry ? pullOf.get(entry.id) : undefined
    const failed = entry ? failureOf.get(entry.id) : undefined
    const place = queue.get(row.id)
    // docs/api.md §7 Poll rule 7: of what the batch needs, what each host's engine (or the entry) lacks.
    const needs = needsOf(row.needs)
    const hosts = (entry && hostsOf.get(entry.id)) ?? []
    return waitingReason({
      batch: { model: row.model, split: row.split },
      entry,
      hosts:
        needs.length && entry ? hosts.map((h) => ({ ...h, lacks: lacking(h.view, entry, needs) })) : hosts,
      pull: pull
        ? {
            worker_name: pull.worker.name,
            org_id: pull.worker.org_id,
            live: !pullLapsed(deps, {
              pull: pull.pull,
              status: pull.worker.status,
              last_seen_at: pull.worker.last_seen_at,
            }),
            progress_status: pull.pull.progress_status,
            completed_bytes: pull.pull.completed_bytes,
            total_bytes: pull.pull.total_bytes,
          }
        : null,
      failure: failed
        ? {
            worker_name: failed.worker.name,
            org_id: failed.worker.org_id,
            error: failed.failure.error,
            failures: failed.failure.failures,
            retry_at: failed.failure.retry_at,
          }
        : null,
      ahead: place?.ahead ?? none,
      running: place?.running ?? none,
      viewer,
    })
  }
}
