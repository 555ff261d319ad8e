import type { Deps } from '../../deps'
import {
  backedOff,
  backOffDownload,
  type DownloadBackoff,
  type PullSource,
  pullPin,
  pullSource,
} from '../../domain/downloads'
import type { HostedModel } from '../../domain/inventory'
import { type CatalogueEntry, matchEntry, type WorkerView } from '../../domain/matching'
import { log } from '../../lib/logger'
import type { ModelProgressBody } from '../../protocol/worker'
import type { CurrentPull } from '../../store/fleet'
import { isOnline, onlineCutoff } from './liveness'
import { loadCatalogue, loadWorkerView, someOnlineWorkerServes } from './matching'

// docs/api.md §7 pull_models, docs/api.md §4 catalogue rule 9 (on-the-fly downloads only materialise an existing
// catalogue entry onto a worker that lacks it). Asked in a heartbeat response when validated
// batches wait for an entry no online worker can serve; at most one worker at a time per entry.
// Only what the worker's runtime can fetch is asked for (src/domain/downloads.ts pullSource), and
// never of a worker backed off from the entry after a failed download (src/domain/downloads.ts
// backOffDownload, kept by settlePull).

export interface PullItem extends PullSource {
  catalogue_id: string
  runtime: string
  runtime_model_id: string
  digest: string | null
  size_gb: number
  vram_gb: number | null
}

/** An ask lapses when its worker is gone or offline, or silent about it for the heartbeat timeout. */
export function pullLapsed(deps: Deps, row: CurrentPull) {
  const alive = row.status !== null && isOnline(deps, { status: row.status, last_seen_at: row.last_seen_at! })
  return !alive || row.pull.last_progress_at <= onlineCutoff(deps)
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
export async function pullModelsFor(deps: Deps, workerId: string): Promise<PullItem[]> {
  const fleet = deps.store.fleet
  const worker = await fleet.findWorker(workerId)
  if (!worker || worker.max_download_gb <= 0 || worker.activity !== 'idle' || !isOnline(deps, worker))
    return []
  const catalogue = await loadCatalogue(deps)
  const view = await loadWorkerView(deps, worker)

  // One download at a time per worker: an outstanding ask it has not finished blocks another.
  for (const pull of await fleet.pullsOfWorker(workerId)) {
    const entry = catalogue.byId.get(pull.catalog_id)
    const done = !entry || matchEntry(view, entry) !== null
    const stale = pull.last_progress_at <= onlineCutoff(deps)
    if (done || stale) await fleet.dropPull(pull.catalog_id, workerId)
    else return []
  }

  let backoffs: Map<string, DownloadBackoff> | null = null
  for (const entry of catalogue.entries) {
    if (!entry.enabled || entry.size_gb === null || entry.size_gb > worker.max_download_gb) continue
    if (matchEntry(view, entry)) continue // it already has it
    // The first profile of a runtime this worker runs that can fetch the entry.
    let profile: (typeof entry.profiles)[number] | undefined
    let source: PullSource | null = null
    for (const p of entry.profiles) {
      if (!view.engines.includes(p.runtime)) continue
      source = pullSource(p.runtime, entry)
      if (source) {
        profile = p
        break
      }
    }
    if (!profile || !source || !wouldServe(view, entry, profile.runtime, profile.runtime_model_id)) continue
    // docs/api.md §7 model-progress `failed`: a worker backed off from this download is not asked.
    backoffs ??= new Map((await fleet.pullFailuresOfWorker(workerId)).map((f) => [f.catalog_id, f]))
    const pin = pullPin({ runtime_model_id: profile.runtime_model_id, digest: entry.digest, ...source })
    if (backedOff(backoffs.get(entry.id), pin, deps.clock.now())) continue
    if (!(await fleet.hasValidatedBatch(catalogue.slugsOf(entry)))) continue
    const current = await fleet.currentPull(entry.id)
    if (current && !pullLapsed(deps, current)) continue
    if (await someOnlineWorkerServes(deps, entry)) continue
    const now = deps.clock.now()
    const asked = await fleet.askPull(
      {
        catalog_id: entry.id,
        worker_id: workerId,
        runtime: profile.runtime,
        runtime_model_id: profile.runtime_model_id,
        asked_at: now,
        last_progress_at: now,
      },
      current?.pull.asked_at ?? null,
    )
    if (!asked) continue // someone else just asked
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
        vram_gb: entry.vram_gb,
        ...source,
      },
    ]
  }
  return []
}

/**
 * docs/api.md §7 model-progress: what a finished download of `workerId` means for its back-off from
 * the entry it was asked for (src/domain/downloads.ts). `completed` ends the back-off; `failed`
 * grows it (a daemon refusing the ask while backed off keeps its count; a stopped one sets none).
 * Called before the ask itself ends, so that no poll in between finds the worker free to ask again.
 */
export async function settlePull(
  deps: Deps,
  workerId: string,
  body: Pick<ModelProgressBody, 'model' | 'status' | 'error' | 'cause'>,
) {
  if (body.status !== 'completed' && body.status !== 'failed') return
  const fleet = deps.store.fleet
  const ask = (await fleet.pullsOfWorker(workerId)).find(
    (p) => p.runtime_model_id === body.model || p.catalog_id === body.model,
  )
  if (!ask) return
  if (body.status === 'completed') return fleet.clearPullFailure(ask.catalog_id, workerId)
  if (body.cause === 'stopped') return
  const entry = (await loadCatalogue(deps)).byId.get(ask.catalog_id)
  if (!entry) return
  const pin = pullPin({
    runtime_model_id: ask.runtime_model_id,
    digest: entry.digest,
    ...(pullSource(ask.runtime, entry) ?? {}),
  })
  const now = deps.clock.now()
  const prev = (await fleet.pullFailuresOfWorker(workerId)).find((f) => f.catalog_id === ask.catalog_id)
  const next = backOffDownload(prev, pin, now, body.cause !== 'backed_off')
  await fleet.setPullFailure({
    catalog_id: ask.catalog_id,
    worker_id: workerId,
    runtime: ask.runtime,
    runtime_model_id: ask.runtime_model_id,
    pin,
    failures: next.failures,
    error: body.error || 'the download failed',
    failed_at: now,
    retry_at: next.retry_at,
  })
  log.warn('model download failed; the worker is not asked for it again until retry_at', {
    worker_id: workerId,
    catalogue_id: ask.catalog_id,
    failures: next.failures,
    retry_at: new Date(next.retry_at * 1000).toISOString(),
  })
}
