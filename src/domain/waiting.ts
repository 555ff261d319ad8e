import { type CatalogueEntry, fitsWorker, hostingMatch, matchEntry, type WorkerView } from './matching'

// docs/api.md §6 `waiting`: why a `validated` batch has not been claimed yet, decided from plain
// facts about its catalogue entry, the workers hosting it, the entry's download and the queue. A
// reason is data — a code, a sentence, and the figures behind it — so a new one is a new case
// here and a row of the table in docs/api.md §6, nothing more.

export type WaitingReason =
  | 'not_in_catalogue'
  | 'no_worker'
  | 'no_fit'
  | 'no_capability'
  | 'no_shard_worker'
  | 'downloading'
  | 'download_failed'
  | 'load_failed'
  | 'loading'
  | 'queued'

/** Batches and their requests not yet done (total − completed − failed). */
export interface Tally {
  batches: number
  requests: number
}

interface Of<R extends WaitingReason, D> {
  reason: R
  message: string
  details: D
}

export type Waiting =
  | Of<'not_in_catalogue', Record<string, never>>
  | Of<'no_worker', { offline_workers: number }>
  | Of<'no_fit', { vram_gb: number | null; workers: number }>
  | Of<'no_capability', { needs: string[]; workers: number }>
  | Of<'no_shard_worker', { workers: number }>
  | Of<
      'downloading',
      {
        worker_name: string | null
        status: 'downloading' | 'verifying'
        completed_bytes: number | null
        total_bytes: number | null
      }
    >
  | Of<
      'download_failed',
      {
        catalogue_id: string
        worker_name: string | null
        error: string | null
        failures: number
        retry_at: number
      }
    >
  | Of<
      'load_failed',
      {
        worker_name: string | null
        error: string | null
        failures: number
        retry_at: number
        workers: number
      }
    >
  | Of<'loading', { worker_name: string | null; workers: number }>
  | Of<'queued', { ahead: Tally; running: Tally; workers: number }>

/** A worker hosting a model named like one of the entry's serving profiles, online or not. */
export interface WaitingHost {
  /** What the matching predicate reads of it (docs/api.md §7 Poll rules). */
  view: WorkerView
  name: string
  /** Online when read (src/modules/workers/liveness.ts). */
  online: boolean
  /** docs/api.md §7 heartbeat `loading_models`, as last reported. */
  loading: readonly string[]
  /** docs/api.md §7 heartbeat `load_failures`, as last reported, those whose `retry_at` is to come. */
  loadFailures: readonly { name: string; error: string; failures: number; retry_at: number }[]
  /** docs/api.md §16: registered with capabilities.shards. */
  shards: boolean
  /**
   * Of the capabilities the batch needs, those this worker cannot meet (docs/api.md §7 Poll rule 7:
   * the entry's AND its engine's; src/domain/matching.ts lacking).
   */
  lacks: readonly string[]
}

/** The entry's download ask (docs/api.md §7 pull_models), with its worker. */
export interface WaitingPull {
  worker_name: string
  org_id: string
  /** Not lapsed: its worker online and not silent about it (src/modules/workers/pulls.ts). */
  live: boolean
  progress_status: 'downloading' | 'verifying' | null
  completed_bytes: number | null
  total_bytes: number | null
}

/** The entry's last failed download still backed off (docs/api.md §7 model-progress `failed`). */
export interface WaitingFailure {
  worker_name: string
  org_id: string
  error: string
  failures: number
  /** Unix seconds: that worker is not asked for the entry again before. */
  retry_at: number
}

/** Who reads the batch: a worker's name is theirs to see only in their own orgs (docs/api.md §6). */
export interface Viewer {
  superadmin: boolean
  orgIds: ReadonlySet<string>
}

export interface WaitingFacts {
  /** `model` is batches.model as submitted; `split`: docs/api.md §16, it already runs as shards. */
  batch: { model: string; split: boolean }
  /** The entry `model` resolves to (docs/api.md §7 Poll rule 1), enabled or not. */
  entry: CatalogueEntry | undefined
  hosts: readonly WaitingHost[]
  pull: WaitingPull | null
  failure: WaitingFailure | null
  /** The validated batches of the entry created before this one (docs/api.md §6 `queued`). */
  ahead: Tally
  /** The entry's batches in progress. */
  running: Tally
  viewer: Viewer
}

const plural = (n: number, one: string, many = `${one}s`) =>
  `${n.toLocaleString('en-US')} ${n === 1 ? one : many}`

/** Bytes as a person reads them: decimal units, one decimal place. */
export function formatBytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)} GB`
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`
  return plural(n, 'byte')
}

const sees = (viewer: Viewer, orgId: string) => viewer.superadmin || viewer.orgIds.has(orgId)

/** docs/api.md §6 `waiting`: the first reason that holds, in the order of the table there. */
export function waitingReason(f: WaitingFacts): Waiting {
  const { entry, viewer } = f
  const model = f.batch.model
  // docs/api.md §7 Poll rule 1: no enabled entry, no claim.
  if (!entry?.enabled) {
    return {
      reason: 'not_in_catalogue',
      message: `${model} is not an enabled catalogue model now; no worker takes this batch until an administrator enables it again.`,
      details: {},
    }
  }
  // Org-private entries (docs/api.md §4 catalogue rule 10) never run on another org's machines:
  // such a worker is no host of it at all.
  const hosts = f.hosts.filter(
    (h) => (entry.org_id === null || entry.org_id === h.view.org_id) && hostingMatch(h.view, entry),
  )
  const online = hosts.filter((h) => h.online)
  // docs/api.md §7 Poll rule 2: the fit of the profile the worker would run it with.
  const fitting = online.filter((h) => fitsWorker(h.view, entry, hostingMatch(h.view, entry)!.profile))
  const capable = fitting.filter((h) => h.lacks.length === 0)
  // docs/api.md §16: the rest of a split batch goes to shard-capable workers only.
  const serving = f.batch.split ? capable.filter((h) => h.shards) : capable

  if (serving.length === 0) {
    const pull = f.pull
    if (pull?.live) {
      const who = sees(viewer, pull.org_id) ? pull.worker_name : null
      const subject = who === null ? 'A worker' : `Worker ${who}`
      const status = pull.progress_status ?? 'downloading'
      const bytes =
        pull.completed_bytes === null
          ? 'no progress reported yet'
          : pull.total_bytes === null
            ? `${formatBytes(pull.completed_bytes)} so far`
            : `${formatBytes(pull.completed_bytes)} of ${formatBytes(pull.total_bytes)}`
      return {
        reason: 'downloading',
        message:
          status === 'verifying'
            ? `${subject} has downloaded ${model} and is verifying it.`
            : `${subject} is downloading ${model}: ${bytes}.`,
        details: {
          worker_name: who,
          status,
          completed_bytes: pull.completed_bytes,
          total_bytes: pull.total_bytes,
        },
      }
    }
    // docs/api.md §7 model-progress `failed`: the download failed and its worker backs off.
    const failed = f.failure
    if (failed) {
      const mine = sees(viewer, failed.org_id)
      const when = `${new Date(failed.retry_at * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`
      return {
        reason: 'download_failed',
        message: mine
          ? `Worker ${failed.worker_name} could not download ${model}: ${failed.error}. It is not asked for it again before ${when}.`
          : `A worker could not download ${model}; it is not asked for it again before ${when}.`,
        details: {
          catalogue_id: entry.id,
          worker_name: mine ? failed.worker_name : null,
          error: mine ? failed.error : null,
          failures: failed.failures,
          retry_at: failed.retry_at,
        },
      }
    }
    if (capable.length > 0) {
      return {
        reason: 'no_shard_worker',
        message: `This batch runs as shards; ${plural(capable.length, 'online worker')} can serve ${model}, but none takes shards.`,
        details: { workers: capable.length },
      }
    }
    if (fitting.length > 0) {
      const needs = [...new Set(fitting.flatMap((h) => h.lacks))].sort()
      return {
        reason: 'no_capability',
        message: `${plural(fitting.length, 'online worker')} can run ${model}, but none whose runtime supports ${needs.join(', ')}.`,
        details: { needs, workers: fitting.length },
      }
    }
    if (online.length > 0) {
      return {
        reason: 'no_fit',
        // docs/api.md §7 Poll rule 2: with GPUs reported one by one, it is theirs that do not hold it.
        message: `${plural(online.length, 'online worker')} ${online.length === 1 ? 'hosts' : 'host'} ${model}, but none has ${online.some((h) => h.view.gpus_gb.length > 0) ? 'GPUs that hold the' : 'the'} ${entry.vram_gb} GB of VRAM it needs.`,
        details: { vram_gb: entry.vram_gb, workers: online.length },
      }
    }
    const offline = hosts.length
    return {
      reason: 'no_worker',
      message:
        offline === 0
          ? `No online worker hosts ${model}; no worker has registered it.`
          : `No online worker hosts ${model}; ${plural(offline, 'worker')} that ${offline === 1 ? 'hosts' : 'host'} it ${offline === 1 ? 'is' : 'are'} offline.`,
      details: { offline_workers: offline },
    }
  }

  const names = new Set(entry.profiles.map((p) => p.runtime_model_id))
  // docs/api.md §7 heartbeat load_failures and poll failed_models: every worker that could serve it
  // failed to load it and does not try again yet.
  const failedOn = serving.map((h) => ({ h, f: h.loadFailures.find((x) => names.has(x.name)) }))
  if (failedOn.every((x) => x.f)) {
    const sorted = [...failedOn].sort(
      (a, b) => a.f!.retry_at - b.f!.retry_at || a.h.name.localeCompare(b.h.name),
    )
    const first = sorted[0]!
    const shown = sorted.find((x) => sees(viewer, x.h.view.org_id)) ?? null
    const when = `${new Date(first.f!.retry_at * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`
    const all =
      serving.length === 1
        ? ''
        : ` (all ${plural(serving.length, 'online worker')} that can serve it failed to load it)`
    return {
      reason: 'load_failed',
      message: shown
        ? `Worker ${shown.h.name} failed to load ${model}: ${shown.f!.error}${all}. It is not loaded there again before ${when}.`
        : `A worker failed to load ${model}${all}; it is not loaded there again before ${when}.`,
      details: {
        worker_name: shown?.h.name ?? null,
        error: shown ? shown.f!.error : null,
        failures: (shown ?? first).f!.failures,
        retry_at: first.f!.retry_at,
        workers: serving.length,
      },
    }
  }

  // docs/api.md §7 Poll rule 5: nobody serving it has it in VRAM, and somebody is loading it.
  const loading = serving
    .filter((h) => h.loading.some((n) => names.has(n)))
    .sort((a, b) => a.name.localeCompare(b.name))
  if (loading.length > 0 && !serving.some((h) => matchEntry(h.view, entry)?.loaded)) {
    const who = loading.find((h) => sees(viewer, h.view.org_id))?.name ?? null
    const others = loading.length - 1
    return {
      reason: 'loading',
      message: `${who === null ? 'A worker' : `Worker ${who}`} is loading ${model} now${
        others > 0 ? ` (${plural(loading.length, 'worker')} are loading it)` : ''
      }.`,
      details: { worker_name: who, workers: loading.length },
    }
  }

  const { ahead, running } = f
  const place =
    ahead.batches === 0
      ? `Next in line for ${model}`
      : `Queued behind ${plural(ahead.requests, 'request')} in ${plural(ahead.batches, 'batch', 'batches')} of ${model}`
  const busy =
    running.batches === 0
      ? ''
      : `; ${plural(running.batches, 'batch', 'batches')} of it ${running.batches === 1 ? 'is' : 'are'} running (${plural(running.requests, 'request')} left)`
  return {
    reason: 'queued',
    message: `${place}; ${plural(serving.length, 'online worker')} can serve it${busy}.`,
    details: { ahead, running, workers: serving.length },
  }
}
