import { and, eq, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import { batches, modelPulls, workers } from '../../db/schema'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { log } from '../../lib/logger'
import {
  type CatalogueEntry,
  type HostedModel,
  isOnline,
  loadCatalogue,
  loadWorkerView,
  matchEntry,
  matchingStatements,
  someOnlineWorkerServes,
  type WorkerView,
} from './matching'

// API.md §7 pull_models, SPEC §2 rule 9 (on-the-fly downloads only materialise an existing
// catalogue entry onto a worker that lacks it). Asked in a heartbeat response when validated
// batches wait for an entry no online worker can serve; at most one worker at a time per entry.

export interface PullItem {
  catalogue_id: string
  runtime: string
  runtime_model_id: string
  digest: string | null
  size_gb: number
}

function prepare(db: Deps['db']) {
  return {
    waiting: db
      .select({ id: batches.id })
      .from(batches)
      .where(and(eq(batches.status, 'validated'), eq(batches.model, sql.placeholder('model'))))
      .limit(1)
      .prepare(),
    pullOf: db
      .select({ pull: modelPulls, status: workers.status, last_seen_at: workers.last_seen_at })
      .from(modelPulls)
      .leftJoin(workers, eq(workers.id, modelPulls.worker_id))
      .where(eq(modelPulls.catalog_id, sql.placeholder('catalog_id')))
      .prepare(),
    pullsOfWorker: db
      .select()
      .from(modelPulls)
      .where(eq(modelPulls.worker_id, sql.placeholder('worker_id')))
      .prepare(),
  }
}
const stmts = preparedOnce(prepare)

/** An ask lapses when its worker is gone or offline, or silent about it for the heartbeat timeout. */
function lapsed(
  deps: Deps,
  row: { pull: { last_progress_at: number }; status: string | null; last_seen_at: number | null },
) {
  const alive =
    row.status !== null && isOnline(deps, { status: row.status as 'online', last_seen_at: row.last_seen_at! })
  return !alive || row.pull.last_progress_at <= deps.clock.now() - deps.config.HEARTBEAT_TIMEOUT_SECONDS
}

/** The same predicate poll uses, asked of the worker as if it held the entry's artifact. */
function wouldServe(view: WorkerView, entry: CatalogueEntry, runtime: string, runtimeModelId: string) {
  const artifact: HostedModel = {
    name: runtimeModelId,
    runtime,
    digest: entry.digest,
    loaded: false,
    advertised: true,
    configured: false,
    on_disk: true,
  }
  const files: HostedModel[] = entry.artifact_sha256.map((sha, i) => ({
    ...artifact,
    name: `\0artifact-${i}`,
    digest: sha,
  }))
  return matchEntry({ ...view, models: [...view.models, artifact, ...files] }, entry) !== null
}

/** What this (idle, heartbeated) worker should download now: at most one entry. */
export function pullModelsFor(deps: Deps, workerId: string): PullItem[] {
  const worker = matchingStatements(deps).workerById.get({ id: workerId })
  if (!worker || worker.max_download_gb <= 0 || worker.activity !== 'idle' || !isOnline(deps, worker))
    return []
  const s = stmts(deps)
  const catalogue = loadCatalogue(deps)
  const view = loadWorkerView(deps, worker)

  // One download at a time per worker: an outstanding ask it has not finished blocks another.
  for (const pull of s.pullsOfWorker.all({ worker_id: workerId })) {
    const entry = catalogue.byId.get(pull.catalog_id)
    const done = !entry || matchEntry(view, entry) !== null
    const stale = pull.last_progress_at <= deps.clock.now() - deps.config.HEARTBEAT_TIMEOUT_SECONDS
    if (done || stale) {
      writeTx(deps.db, (tx) =>
        tx
          .delete(modelPulls)
          .where(and(eq(modelPulls.catalog_id, pull.catalog_id), eq(modelPulls.worker_id, workerId)))
          .run(),
      )
    } else return []
  }

  for (const entry of catalogue.entries) {
    if (!entry.enabled || entry.size_gb === null || entry.size_gb > worker.max_download_gb) continue
    if (matchEntry(view, entry)) continue // it already has it
    const profile = entry.profiles.find((p) => view.engines.includes(p.runtime))
    if (!profile || !wouldServe(view, entry, profile.runtime, profile.runtime_model_id)) continue
    if (!catalogue.slugsOf(entry).some((model) => s.waiting.get({ model }))) continue
    const current = s.pullOf.get({ catalog_id: entry.id })
    if (current && !lapsed(deps, current)) continue
    if (someOnlineWorkerServes(deps, entry)) continue
    const now = deps.clock.now()
    const asked = writeTx(deps.db, (tx) => {
      const again = tx.select().from(modelPulls).where(eq(modelPulls.catalog_id, entry.id)).get()
      if (again && again.asked_at !== current?.pull.asked_at) return false // someone else just asked
      tx.delete(modelPulls).where(eq(modelPulls.catalog_id, entry.id)).run()
      tx.insert(modelPulls)
        .values({
          catalog_id: entry.id,
          worker_id: workerId,
          runtime: profile.runtime,
          runtime_model_id: profile.runtime_model_id,
          asked_at: now,
          last_progress_at: now,
        })
        .run()
      return true
    })
    if (!asked) continue
    log.info('worker asked to pull a model', {
      worker_id: workerId,
      catalogue_id: entry.id,
      runtime: profile.runtime,
    })
    return [
      {
        catalogue_id: entry.id,
        runtime: profile.runtime,
        runtime_model_id: profile.runtime_model_id,
        digest: entry.digest,
        size_gb: entry.size_gb,
      },
    ]
  }
  return []
}
