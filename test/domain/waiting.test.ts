import { describe, expect, test } from 'bun:test'
import type { CatalogueEntry } from '../../src/domain/matching'
import {
  formatBytes,
  type WaitingFacts,
  type WaitingFailure,
  type WaitingHost,
  type WaitingPull,
  waitingReason,
} from '../../src/domain/waiting'

// docs/api.md §6 `waiting`: the rule alone, on plain facts — the order of the reasons, what counts
// as a host, and whose names a reader sees.

const ENTRY: CatalogueEntry = {
  id: 'llama-8b-q4km',
  renamed_from: null,
  enabled: true,
  org_id: null,
  display_name: 'Llama 8B',
  parameter_size: '8B',
  vram_gb: 8,
  size_gb: 5,
  digest: null,
  profiles: [{ runtime: 'ollama', runtime_model_id: 'llama:8b', params: {} }],
  artifact_sha256: [],
  capabilities: [],
  artifact_files: [],
  source_type: null,
  source_ref: null,
  source_revision: null,
}

function host(o: Partial<WaitingHost> & { vram?: number | null; org?: string; model?: string } = {}) {
  const { vram = 24, org = 'org_lab', model = 'llama:8b', ...rest } = o
  return {
    view: {
      org_id: org,
      heartbeated: true,
      vram_total_gb: vram,
      gpus_gb: [],
      engines: ['ollama'],
      reported: {},
      models: [
        {
          name: model,
          runtime: 'ollama',
          digest: null,
          loaded: false,
          advertised: true,
          configured: false,
          on_disk: true,
        },
      ],
    },
    name: 'box-a',
    online: true,
    loading: [],
    loadFailures: [],
    shards: false,
    lacks: [],
    ...rest,
  } satisfies WaitingHost
}

const PULL: WaitingPull = {
  worker_name: 'box-dl',
  org_id: 'org_lab',
  live: true,
  progress_status: 'downloading',
  completed_bytes: 500_000_000,
  total_bytes: 2_000_000_000,
}

const FAILED: WaitingFailure = {
  worker_name: 'box-dl',
  org_id: 'org_lab',
  error: `sha256 of llama.gguf is ${'b'.repeat(64)}, the catalogue's is ${'a'.repeat(64)}; the file was deleted`,
  failures: 1,
  retry_at: Date.UTC(2026, 4, 1, 12, 40) / 1000,
}

const none = { batches: 0, requests: 0 }

function facts(o: Partial<WaitingFacts> = {}): WaitingFacts {
  return {
    batch: { model: ENTRY.id, split: false },
    entry: ENTRY,
    hosts: [],
    pull: null,
    failure: null,
    ahead: none,
    running: none,
    viewer: { superadmin: false, orgIds: new Set(['org_lab']) },
    ...o,
  }
}

const reason = (o: Partial<WaitingFacts>) => waitingReason(facts(o)).reason

describe('the order of the reasons', () => {
  test('an entry gone from the catalogue, or disabled, outranks everything', () => {
    expect(reason({ entry: undefined, hosts: [host()] })).toBe('not_in_catalogue')
    expect(reason({ entry: { ...ENTRY, enabled: false }, hosts: [host()] })).toBe('not_in_catalogue')
  })

  test('a live download outranks the reasons it will end; a lapsed one is ignored', () => {
    expect(reason({ pull: PULL })).toBe('downloading')
    expect(reason({ pull: PULL, hosts: [host({ vram: 4 })] })).toBe('downloading')
    expect(reason({ pull: { ...PULL, live: false } })).toBe('no_worker')
    // Once a worker serves it, the ask is beside the point.
    expect(reason({ pull: PULL, hosts: [host()] })).toBe('queued')
  })

  test('download_failed: no download under way, nobody serving it, and its last download failed', () => {
    expect(waitingReason(facts({ failure: FAILED }))).toEqual({
      reason: 'download_failed',
      message: `Worker box-dl could not download ${ENTRY.id}: ${FAILED.error}. It is not asked for it again before 2026-05-01 12:40 UTC.`,
      details: {
        catalogue_id: ENTRY.id,
        worker_name: 'box-dl',
        error: FAILED.error,
        failures: 1,
        retry_at: FAILED.retry_at,
      },
    })
    // It outranks the reasons a download would have ended; a download under way, or a worker
    // serving the entry, outranks it.
    expect(reason({ failure: FAILED, hosts: [host({ vram: 4 })] })).toBe('download_failed')
    expect(reason({ failure: FAILED, pull: PULL })).toBe('downloading')
    expect(reason({ failure: FAILED, hosts: [host()] })).toBe('queued')
    // Another org's worker: neither its name nor its words (a path on its disk).
    const outsider = waitingReason(
      facts({ failure: FAILED, viewer: { superadmin: false, orgIds: new Set() } }),
    )
    expect(outsider.message).toBe(
      `A worker could not download ${ENTRY.id}; it is not asked for it again before 2026-05-01 12:40 UTC.`,
    )
    expect(outsider.details).toMatchObject({ worker_name: null, error: null })
  })

  test('no_shard_worker: the rest of a split batch needs a shard-capable worker', () => {
    const split = { model: ENTRY.id, split: true }
    expect(waitingReason(facts({ batch: split, hosts: [host(), host({ name: 'box-b' })] }))).toEqual({
      reason: 'no_shard_worker',
      message: `This batch runs as shards; 2 online workers can serve ${ENTRY.id}, but none takes shards.`,
      details: { workers: 2 },
    })
    expect(reason({ batch: split, hosts: [host({ shards: true })] })).toBe('queued')
    expect(reason({ batch: split, hosts: [host({ vram: 4 })] })).toBe('no_fit')
  })

  test('no_capability: hosts that fit, but whose runtime lacks what the batch needs', () => {
    const lacking = [host({ lacks: ['vision'] }), host({ lacks: ['logprobs', 'vision'] })]
    expect(waitingReason(facts({ hosts: lacking }))).toEqual({
      reason: 'no_capability',
      message: `2 online workers can run ${ENTRY.id}, but none whose runtime supports logprobs, vision.`,
      details: { needs: ['logprobs', 'vision'], workers: 2 },
    })
    expect(reason({ hosts: [...lacking, host()] })).toBe('queued')
  })

  test('no_fit counts the online hosts; a never-heartbeated one is not judged on VRAM', () => {
    expect(waitingReason(facts({ hosts: [host({ vram: 4 }), host({ vram: null })] }))).toEqual({
      reason: 'no_fit',
      message: `2 online workers host ${ENTRY.id}, but none has the 8 GB of VRAM it needs.`,
      details: { vram_gb: 8, workers: 2 },
    })
    const fresh = host({ vram: null })
    expect(reason({ hosts: [{ ...fresh, view: { ...fresh.view, heartbeated: false } }] })).toBe('queued')
  })

  test('no_worker counts the offline hosts, and only hosts of this artifact', () => {
    expect(reason({ hosts: [host({ model: 'other:1' })] })).toBe('no_worker')
    expect(waitingReason(facts({ hosts: [host({ online: false }), host({ online: false })] }))).toEqual({
      reason: 'no_worker',
      message: `No online worker hosts ${ENTRY.id}; 2 workers that host it are offline.`,
      details: { offline_workers: 2 },
    })
    // docs/api.md §7 Poll rule 4: the same tag with another digest is another artifact.
    const pinned = { ...ENTRY, digest: 'a'.repeat(64) }
    const h = host()
    const other = { ...h, view: { ...h.view, models: [{ ...h.view.models[0]!, digest: 'b'.repeat(64) }] } }
    expect(reason({ entry: pinned, hosts: [other] })).toBe('no_worker')
  })

  test('an org-private entry is hosted only by its org’s workers', () => {
    const mine = { ...ENTRY, org_id: 'org_lab' }
    expect(reason({ entry: mine, hosts: [host({ org: 'org_other' })] })).toBe('no_worker')
    expect(reason({ entry: mine, hosts: [host({ org: 'org_other', vram: 4 })] })).toBe('no_worker')
    expect(reason({ entry: mine, hosts: [host()] })).toBe('queued')
  })

  test('loading while nobody serving it has it loaded; loaded somewhere, it is queued', () => {
    expect(waitingReason(facts({ hosts: [host({ loading: ['llama:8b'] }), host()] }))).toEqual({
      reason: 'loading',
      message: `Worker box-a is loading ${ENTRY.id} now.`,
      details: { worker_name: 'box-a', workers: 1 },
    })
    const loaded = host({ name: 'box-b' })
    loaded.view.models[0]!.loaded = true
    expect(reason({ hosts: [host({ loading: ['llama:8b'] }), loaded] })).toBe('queued')
    // Loading another model says nothing about this one.
    expect(reason({ hosts: [host({ loading: ['other:1'] })] })).toBe('queued')
  })
})

describe('names and figures', () => {
  test('a worker is named only to its org’s members and superadmins', () => {
    const outsider = { superadmin: false, orgIds: new Set(['org_else']) }
    expect(waitingReason(facts({ pull: PULL, viewer: outsider }))).toEqual({
      reason: 'downloading',
      message: `A worker is downloading ${ENTRY.id}: 500.0 MB of 2.0 GB.`,
      details: {
        worker_name: null,
        status: 'downloading',
        completed_bytes: 500_000_000,
        total_bytes: 2_000_000_000,
      },
    })
    const admin = { superadmin: true, orgIds: new Set<string>() }
    const pulling = waitingReason(facts({ pull: PULL, viewer: admin }))
    expect(pulling.details).toMatchObject({ worker_name: 'box-dl' })
    // Of several workers loading it, one the reader may see is named.
    const loading = [
      host({ name: 'a-theirs', org: 'org_else', loading: ['llama:8b'] }),
      host({ name: 'b-mine', loading: ['llama:8b'] }),
    ]
    expect(waitingReason(facts({ hosts: loading }))).toEqual({
      reason: 'loading',
      message: `Worker b-mine is loading ${ENTRY.id} now (2 workers are loading it).`,
      details: { worker_name: 'b-mine', workers: 2 },
    })
    expect(
      waitingReason(facts({ hosts: loading, viewer: { superadmin: false, orgIds: new Set() } })).details,
    ).toEqual({ worker_name: null, workers: 2 })
  })

  test('load_failed: every worker that can serve it failed to load it and does not try again yet; one that may, queued', () => {
    const failure = (retry_at: number, error = 'exit code 1: model is corrupted') => [
      { name: 'llama:8b', error, failures: 2, retry_at },
    ]
    // 2026-01-01 00:00 UTC, and a minute later.
    const t0 = 1_767_225_600
    const one = [host({ name: 'box-a', loadFailures: failure(t0 + 60) })]
    expect(waitingReason(facts({ hosts: one }))).toEqual({
      reason: 'load_failed',
      message: `Worker box-a failed to load ${ENTRY.id}: exit code 1: model is corrupted. It is not loaded there again before 2026-01-01 00:01 UTC.`,
      details: {
        worker_name: 'box-a',
        error: 'exit code 1: model is corrupted',
        failures: 2,
        retry_at: t0 + 60,
        workers: 1,
      },
    })
    // Two such workers: the first to try again says when; one of another org is not named.
    const two = [
      host({ name: 'a-theirs', org: 'org_else', loadFailures: failure(t0, 'their error') }),
      host({ name: 'b-mine', loadFailures: failure(t0 + 60) }),
    ]
    expect(waitingReason(facts({ hosts: two }))).toMatchObject({
      reason: 'load_failed',
      message: `Worker b-mine failed to load ${ENTRY.id}: exit code 1: model is corrupted (all 2 online workers that can serve it failed to load it). It is not loaded there again before 2026-01-01 00:00 UTC.`,
      details: { worker_name: 'b-mine', retry_at: t0, workers: 2 },
    })
    expect(waitingReason(facts({ hosts: two, viewer: { superadmin: false, orgIds: new Set() } }))).toEqual({
      reason: 'load_failed',
      message: `A worker failed to load ${ENTRY.id} (all 2 online workers that can serve it failed to load it); it is not loaded there again before 2026-01-01 00:00 UTC.`,
      details: { worker_name: null, error: null, failures: 2, retry_at: t0, workers: 2 },
    })
    // Another model's failure, or a worker that may load it: it waits its turn.
    expect(
      waitingReason(facts({ hosts: [host({ loadFailures: [{ ...failure(t0)[0]!, name: 'other:1' }] })] }))
        .reason,
    ).toBe('queued')
    expect(waitingReason(facts({ hosts: [...one, host({ name: 'box-b' })] })).reason).toBe('queued')
  })

  test('queued: the batches ahead and running, in words', () => {
    expect(
      waitingReason(
        facts({
          hosts: [host(), host({ name: 'box-b' })],
          ahead: { batches: 1, requests: 1 },
          running: { batches: 2, requests: 1200 },
        }),
      ),
    ).toEqual({
      reason: 'queued',
      message: `Queued behind 1 request in 1 batch of ${ENTRY.id}; 2 online workers can serve it; 2 batches of it are running (1,200 requests left).`,
      details: { ahead: { batches: 1, requests: 1 }, running: { batches: 2, requests: 1200 }, workers: 2 },
    })
  })

  test('download steps and bytes', () => {
    expect(formatBytes(999)).toBe('999 bytes')
    expect(formatBytes(1)).toBe('1 byte')
    expect(formatBytes(1500)).toBe('1.5 kB')
    expect(formatBytes(4_000_000_000)).toBe('4.0 GB')
    expect(waitingReason(facts({ pull: { ...PULL, total_bytes: null } })).message).toBe(
      `Worker box-dl is downloading ${ENTRY.id}: 500.0 MB so far.`,
    )
    expect(waitingReason(facts({ pull: { ...PULL, progress_status: null, completed_bytes: null } }))).toEqual(
      {
        reason: 'downloading',
        message: `Worker box-dl is downloading ${ENTRY.id}: no progress reported yet.`,
        details: { worker_name: 'box-dl', status: 'downloading', completed_bytes: null, total_bytes: 2e9 },
      },
    )
  })
})
