import { afterEach, describe, expect, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { AppError } from '../../src/lib/errors'
import type { HostedModelInput, Registration } from '../../src/store/fleet'
import { describeWith, postgres } from '../helpers/requires'
import { describeEngine, lit as q, type StoreHarness, storeEngines } from '../helpers/stores'

// The fleet's verbs behave the same on SQLite and on PostgreSQL (docs/api.md §12).

type Harness = StoreHarness

/** Two users, org_a (user_a is a member) and org_b, and one catalogue entry m-a. */
async function seed(h: Harness) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at)
      VALUES ('org_a', 'A', TRUE, 1), ('org_b', 'B', TRUE, 1), ('org_c', 'C', FALSE, 1);
    INSERT INTO memberships (org_id, user_id, role, created_at)
      VALUES ('org_a', 'user_a', 'owner', 1), ('org_c', 'user_a', 'viewer', 1);
    INSERT INTO catalog_entries (id, display_name, created_at, updated_at) VALUES ('m-a', 'A', 1, 1), ('m-b', 'B', 1, 1);`)
}

async function worker(
  h: Harness,
  id: string,
  o: { org?: string; seen?: number; status?: string; activity?: string; vram?: number | null } = {},
) {
  await h.exec(`INSERT INTO workers (id, org_id, name, status, activity, vram_total_gb, loaded_models, registered_at, last_seen_at)
    VALUES (${q(id)}, ${q(o.org ?? 'org_a')}, ${q(id)}, ${q(o.status ?? 'online')}, ${q(o.activity ?? 'idle')},
      ${o.vram === undefined ? 24 : (o.vram ?? 'NULL')}, '[]', 1, ${o.seen ?? 100});`)
}

let seq = 0
async function batch(
  h: Harness,
  o: { model?: string; status?: string; holder?: string; completed?: number } = {},
) {
  const id = `batch_${++seq}`
  await h.exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_total, request_counts_completed, created_at, updated_at)
    VALUES (${q(id)}, 'user_a', 'file-x', '/v1/chat/completions', '24h', ${q(o.model ?? 'm-a')},
      ${q(o.status ?? 'validated')}, 10, ${o.completed ?? 0}, 1, 1);`)
  if (o.holder)
    await h.exec(`INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at)
      VALUES ('asg_${id}', ${q(id)}, ${q(o.holder)}, 'org_a', 1);`)
  return id
}

const model = (name: string, o: Partial<HostedModelInput> = {}): HostedModelInput => ({
  name,
  runtime: null,
  digest: null,
  size_bytes: null,
  loaded: false,
  configured: false,
  on_disk: true,
  ...o,
})

const registration = (o: Partial<Registration> = {}): Registration => ({
  orgId: 'org_a',
  workerId: undefined,
  machineId: undefined,
  fields: {
    name: 'box',
    hostname: 'box.lab',
    daemon_version: '0.1.0',
    key_id: null,
    max_concurrent_jobs: 2,
    max_download_gb: 10,
  },
  runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
  gpus: [{ vendor: 'nvidia', name: 'RTX 4090', vram_gb: 24, driver: null, cuda: null }],
  models: [model('cfg:1', { configured: true, on_disk: false }), model('disk:1', { runtime: 'ollama' })],
  now: 100,
  ...o,
})

const beat = (workerId: string, o: Record<string, unknown> = {}) => ({
  workerId,
  orgId: 'org_a',
  activity: 'idle' as const,
  vram_total_gb: 24,
  vram_available_gb: 20,
  gpu_utilization: 5,
  gpu_memory_used_gb: 4,
  uptime_seconds: 60,
  loaded_models: ['disk:1'],
  current_job_id: null,
  now: 200,
  cutoff: 80,
  ...o,
})

const hosted = async (h: Harness, workerId: string) =>
  (
    await h.all<{
      name: string
      loaded: unknown
      configured: unknown
      on_disk: unknown
      advertised: unknown
    }>(
      `SELECT name, loaded, configured, on_disk, advertised FROM worker_models WHERE worker_id = ${q(workerId)} ORDER BY name`,
    )
  ).map((m) => ({
    name: m.name,
    loaded: Boolean(m.loaded),
    configured: Boolean(m.configured),
    on_disk: Boolean(m.on_disk),
    advertised: Boolean(m.advertised),
  }))

const appError = async (p: Promise<unknown>) => {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  )
  expect(e).toBeInstanceOf(AppError)
  return e as AppError
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} fleet`, () => {
    let h: Harness
    afterEach(async () => {
      await h?.close()
    })

    test('register: a new worker with its runtimes, GPUs and advertised models; findWorker reads it', async () => {
      h = await open()
      await seed(h)
      const got = await h.store.fleet.register(registration({ machineId: 'mach-1' }))
      if ('notOwned' in got) throw new Error('unexpected')
      expect(got.reused).toBe(false)
      expect(got.requeued).toEqual([])
      expect(got.worker).toMatchObject({
        org_id: 'org_a',
        name: 'box',
        status: 'online',
        activity: 'idle',
        machine_id: 'mach-1',
        max_concurrent_jobs: 2,
        max_download_gb: 10,
        last_heartbeat_at: null,
        last_seen_at: 100,
        registered_at: 100,
        loaded_models: [],
      })
      expect(await h.store.fleet.findWorker(got.worker.id)).toEqual(got.worker)
      expect(await h.store.fleet.findWorker('wrk_nope')).toBeUndefined()
      expect(await hosted(h, got.worker.id)).toEqual([
        { name: 'cfg:1', loaded: false, configured: true, on_disk: false, advertised: true },
        { name: 'disk:1', loaded: false, configured: false, on_disk: true, advertised: true },
      ])
      expect(await h.store.fleet.workerHosting(got.worker.id)).toEqual({
        engines: ['ollama'],
        reported: {},
        models: expect.arrayContaining([
          {
            name: 'disk:1',
            runtime: 'ollama',
            digest: null,
            loaded: false,
            advertised: true,
            configured: false,
            on_disk: true,
          },
        ]),
      })
      const gpus = await h.all(`SELECT name FROM worker_gpus WHERE worker_id = ${q(got.worker.id)}`)
      expect(gpus).toEqual([{ name: 'RTX 4090' }])
    })

    test('findWorkerWithHosting: the row exactly as findWorker reads it, and workerHosting, in one read', async () => {
      h = await open()
      await seed(h)
      const got = await h.store.fleet.register(
        registration({
          machineId: 'mach-1',
          // docs/api.md §7: one runtime reports its capabilities, the other leaves them to its defaults.
          runtimes: [
            { engine: 'ollama', base_url: 'http://a', status: 'online', capabilities: { logprobs: false } },
            { engine: 'vllm', base_url: 'http://b', status: 'online' },
          ],
        }),
      )
      if ('notOwned' in got) throw new Error('unexpected')
      await h.exec(`UPDATE workers SET vram_total_gb = 23.5, loaded_models = '["disk:1"]',
        last_heartbeat_at = 1234567890123, uptime_seconds = 7 WHERE id = ${q(got.worker.id)};
        UPDATE worker_models SET digest = 'sha256:ab', loaded = TRUE WHERE name = 'disk:1';`)
      const row = await h.store.fleet.findWorker(got.worker.id)
      expect(row).toMatchObject({
        vram_total_gb: 23.5,
        loaded_models: ['disk:1'],
        last_heartbeat_at: 1234567890123,
      })
      const found = await h.store.fleet.findWorkerWithHosting(got.worker.id)
      expect(found).toEqual({ worker: row!, hosting: await h.store.fleet.workerHosting(got.worker.id) })
      expect(found!.hosting!.engines.sort()).toEqual(['ollama', 'vllm'])
      expect(found!.hosting!.reported).toEqual({ ollama: { logprobs: false } })
      expect(found!.hosting!.models).toContainEqual(
        expect.objectContaining({ name: 'disk:1', digest: 'sha256:ab', loaded: true }),
      )
      // A caller that kept what it derived from this hosting_seq: the row alone.
      expect(await h.store.fleet.findWorkerWithHosting(got.worker.id, row!.hosting_seq)).toEqual({
        worker: row!,
        hosting: null,
      })
      // A worker with nothing hosted yet, and none at all.
      await worker(h, 'wrk_bare')
      expect(await h.store.fleet.findWorkerWithHosting('wrk_bare')).toEqual({
        worker: (await h.store.fleet.findWorker('wrk_bare'))!,
        hosting: { engines: [], reported: {}, models: [] },
      })
      expect(await h.store.fleet.findWorkerWithHosting('wrk_nope')).toBeUndefined()
    })

    test('register again (by id, or by machine_id): held batches requeued once, row reset, child rows and asks replaced', async () => {
      h = await open()
      await seed(h)
      const first = await h.store.fleet.register(registration({ machineId: 'mach-1' }))
      if ('notOwned' in first) throw new Error('unexpected')
      const id = first.worker.id
      await h.store.fleet.heartbeat(beat(id))
      const held = await batch(h, { status: 'in_progress', holder: id })
      await h.exec(`INSERT INTO model_pulls (catalog_id, worker_id, runtime, runtime_model_id, asked_at, last_progress_at)
        VALUES ('m-b', ${q(id)}, 'ollama', 'b:1', 1, 1)`)

      const again = await h.store.fleet.register(
        registration({ machineId: 'mach-1', models: [model('new:1')], gpus: [], now: 300 }),
      )
      if ('notOwned' in again) throw new Error('unexpected')
      expect(again.reused).toBe(true)
      expect(again.worker.id).toBe(id)
      expect(again.requeued).toEqual([
        {
          batch_id: held,
          status: 'validated',
          attempts: 1,
          error: 'worker re-registered',
          model: expect.anything(),
        },
      ])
      expect(again.worker).toMatchObject({ last_heartbeat_at: null, vram_total_gb: null, last_seen_at: 300 })
      const b = await h.one<{ status: string; attempts: number }>(
        `SELECT status, attempts FROM batches WHERE id = ${q(held)}`,
      )
      expect(b).toEqual({ status: 'validated', attempts: 1 })
      expect(Number((await h.one(`SELECT count(*) AS n FROM batch_assignments`)).n)).toBe(0)
      expect(Number((await h.one(`SELECT count(*) AS n FROM model_pulls`)).n)).toBe(0)
      expect(Number((await h.one(`SELECT count(*) AS n FROM worker_gpus`)).n)).toBe(0)
      expect((await hosted(h, id)).map((m) => m.name)).toEqual(['new:1'])

      // By id, the same; another org's id is refused and changes nothing.
      const byId = await h.store.fleet.register(registration({ workerId: id, now: 400 }))
      expect('notOwned' in byId ? null : byId.worker.id).toBe(id)
      expect(await h.store.fleet.register(registration({ workerId: id, orgId: 'org_b' }))).toEqual({
        notOwned: true,
      })
      expect((await h.store.fleet.findWorker(id))?.last_seen_at).toBe(400)
    })

    test('hosting_seq moves whenever the hosting rows change — a registration, a new inventory — and with nothing else', async () => {
      h = await open()
      await seed(h)
      const first = await h.store.fleet.register(registration({ machineId: 'mach-1' }))
      if ('notOwned' in first) throw new Error('unexpected')
      const id = first.worker.id
      const seqs = [first.worker.hosting_seq]
      const now = async () => (await h.store.fleet.findWorker(id))!.hosting_seq
      await h.store.fleet.heartbeat(beat(id))
      seqs.push(await now())
      await h.store.fleet.replaceInventory(id, [model('disk:2')], [], 'sig-1')
      seqs.push(await now())
      await h.store.fleet.heartbeat(beat(id, { vram_total_gb: 48 }))
      seqs.push(await now())
      const again = await h.store.fleet.register(registration({ machineId: 'mach-1', now: 300 }))
      if ('notOwned' in again) throw new Error('unexpected')
      seqs.push(again.worker.hosting_seq, await now())
      expect(seqs).toEqual([0, 0, 1, 1, 2, 2])
    })

    test('register: first registrations of one machine at once make one worker', async () => {
      h = await open()
      await seed(h)
      const all = await Promise.all(
        Array.from({ length: 6 }, () => h.store.fleet.register(registration({ machineId: 'mach-9' }))),
      )
      const ids = new Set(all.map((r) => ('notOwned' in r ? null : r.worker.id)))
      expect(ids.size).toBe(1)
      expect(Number((await h.one(`SELECT count(*) AS n FROM workers`)).n)).toBe(1)
      expect(all.filter((r) => !('notOwned' in r) && !r.reused)).toHaveLength(1)
    })

    test('heartbeat: one statement for liveness, reported fields (absent ones kept) and held batches; null for another org', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { seen: 100 })
      const b1 = await batch(h, { status: 'in_progress', holder: 'wrk_1' })
      expect(await h.store.fleet.heartbeat(beat('wrk_1', { orgId: 'org_b' }))).toBeNull()
      expect(await h.store.fleet.heartbeat(beat('wrk_nope'))).toBeNull()
      expect((await h.store.fleet.findWorker('wrk_1'))?.last_seen_at).toBe(100)

      const got = await h.store.fleet.heartbeat(beat('wrk_1', { activity: 'busy', current_job_id: b1 }))
      expect(got).toEqual({ inventory_sig: null, max_download_gb: 0, fitChanged: true, assigned: [b1] })
      expect(await h.store.fleet.findWorker('wrk_1')).toMatchObject({
        status: 'online',
        activity: 'busy',
        vram_total_gb: 24,
        vram_available_gb: 20,
        gpu_utilization: 5,
        gpu_memory_used_gb: 4,
        uptime_seconds: 60,
        loaded_models: ['disk:1'],
        current_job_id: b1,
        last_heartbeat_at: 200,
        last_seen_at: 200,
      })
      await h.store.fleet.heartbeat(
        beat('wrk_1', { vram_total_gb: null, gpu_utilization: null, uptime_seconds: null, now: 250 }),
      )
      expect(await h.store.fleet.findWorker('wrk_1')).toMatchObject({
        vram_total_gb: 24,
        gpu_utilization: 5,
        uptime_seconds: 60,
        last_seen_at: 250,
      })
    })

    test('heartbeat: fitChanged unless the worker was online, had heartbeated and keeps its VRAM total', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { seen: 100 })
      const fit = async (o: Record<string, unknown>) =>
        (await h.store.fleet.heartbeat(beat('wrk_1', o)))?.fitChanged
      expect(await fit({ now: 200 })).toBe(true) // never heartbeated
      expect(await fit({ now: 210, cutoff: 150 })).toBe(false) // steady
      expect(await fit({ now: 220, cutoff: 150, vram_total_gb: null })).toBe(false) // none reported: kept
      expect(await fit({ now: 230, cutoff: 150, vram_total_gb: 48 })).toBe(true) // another VRAM total
      expect(await fit({ now: 240, cutoff: 150, vram_total_gb: 48 })).toBe(false)
      expect(await fit({ now: 400, cutoff: 240, vram_total_gb: 48 })).toBe(true) // silent since 240: back
      await h.exec(`UPDATE workers SET status = 'offline' WHERE id = 'wrk_1'`)
      expect(await fit({ now: 410, cutoff: 300, vram_total_gb: 48 })).toBe(true) // swept offline: back
      expect(await h.store.fleet.findWorker('wrk_1')).toMatchObject({ status: 'online', last_seen_at: 410 })
    })

    test('heartbeats at once: each its own guarded update and answer', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { seen: 100 })
      await worker(h, 'wrk_2', { seen: 100 })
      await worker(h, 'wrk_b', { seen: 100, org: 'org_b' })
      const held = await batch(h, { status: 'in_progress', holder: 'wrk_2' })
      await h.store.fleet.heartbeat(beat('wrk_2', { now: 150 }))
      const answers = await Promise.all([
        h.store.fleet.heartbeat(beat('wrk_1')),
        h.store.fleet.heartbeat(beat('wrk_b')), // another org's worker
        h.store.fleet.heartbeat(beat('wrk_2', { cutoff: 120 })),
        h.store.fleet.heartbeat(beat('wrk_nope')),
      ])
      expect(answers).toEqual([
        { inventory_sig: null, max_download_gb: 0, fitChanged: true, assigned: [] },
        null,
        { inventory_sig: null, max_download_gb: 0, fitChanged: false, assigned: [held] },
        null,
      ])
      const seen = await h.all<{ id: string; last_seen_at: unknown }>(
        'SELECT id, last_seen_at FROM workers ORDER BY id',
      )
      expect(seen.map((w) => [w.id, Number(w.last_seen_at)])).toEqual([
        ['wrk_1', 200],
        ['wrk_2', 200],
        ['wrk_b', 100],
      ])
    })

    test('beats of one worker at once are written in the order they came', async () => {
      h = await open()
      await seed(h)
      for (const id of ['wrk_0', 'wrk_1', 'wrk_2']) await worker(h, id, { seen: 100 })
      // Interleaved with other workers' beats; the last one sent is the state kept. First as
      // never-heartbeated workers (each beat's full statement), then steady (the group's own).
      for (const start of [200, 300]) {
        await Promise.all(
          Array.from({ length: 12 }, (_, i) =>
            h.store.fleet.heartbeat(beat(`wrk_${i % 3}`, { now: start + i, uptime_seconds: i, cutoff: 150 })),
          ),
        )
        for (const [id, last] of [
          ['wrk_0', 9],
          ['wrk_1', 10],
          ['wrk_2', 11],
        ] as const)
          expect(await h.store.fleet.findWorker(id)).toMatchObject({
            last_seen_at: start + last,
            uptime_seconds: last,
          })
      }
      // A beat whose fit changed (another VRAM total) and a later one of the same worker that
      // would pass as steady: the later report is still the one kept, with the new total.
      await Promise.all([
        h.store.fleet.heartbeat(
          beat('wrk_1', { now: 400, uptime_seconds: 40, vram_total_gb: 48, cutoff: 150 }),
        ),
        h.store.fleet.heartbeat(
          beat('wrk_1', { now: 401, uptime_seconds: 41, vram_total_gb: null, cutoff: 150 }),
        ),
      ])
      expect(await h.store.fleet.findWorker('wrk_1')).toMatchObject({
        last_seen_at: 401,
        uptime_seconds: 41,
        vram_total_gb: 48,
      })
    })

    test('replaceInventory: the inventory replaces the on-disk list, configured names stay, loaded flags follow; without one only loaded flags', async () => {
      h = await open()
      await seed(h)
      const r = await h.store.fleet.register(registration())
      if ('notOwned' in r) throw new Error('unexpected')
      const id = r.worker.id
      await h.store.fleet.replaceInventory(id, [model('disk:2', { loaded: true })], ['extra:1'], 'sig-1')
      expect(await hosted(h, id)).toEqual([
        { name: 'cfg:1', loaded: false, configured: true, on_disk: false, advertised: true },
        { name: 'disk:2', loaded: true, configured: false, on_disk: true, advertised: false },
        { name: 'extra:1', loaded: true, configured: false, on_disk: false, advertised: false },
      ])
      expect((await h.store.fleet.heartbeat(beat(id)))?.inventory_sig).toBe('sig-1')
      await h.store.fleet.replaceInventory(id, undefined, ['cfg:1'], 'sig-2')
      expect(await hosted(h, id)).toEqual([
        { name: 'cfg:1', loaded: true, configured: true, on_disk: false, advertised: true },
        { name: 'disk:2', loaded: false, configured: false, on_disk: true, advertised: false },
      ])
      expect((await h.store.fleet.heartbeat(beat(id)))?.inventory_sig).toBe('sig-2')
    })

    test('removeWorker (docs/api.md §3): only in its org; what it held requeued uncounted, its rows gone, finished assignments kept, one entry; a late inventory is dropped', async () => {
      h = await open()
      await seed(h)
      const r = await h.store.fleet.register(registration())
      if ('notOwned' in r) throw new Error('unexpected')
      const id = r.worker.id
      const held = await batch(h, { status: 'in_progress', holder: id })
      const finished = await batch(h, { status: 'completed', holder: id })
      await h.exec(`UPDATE batch_assignments SET completed_at = 5 WHERE batch_id = ${q(finished)}`)
      expect(await h.store.fleet.removeWorker('org_b', id, 300, SYSTEM_AUDIT)).toBeUndefined()
      const removed = await h.store.fleet.removeWorker('org_a', id, 300, SYSTEM_AUDIT)
      expect(removed?.worker.id).toBe(id)
      expect(removed?.requeued).toEqual([
        expect.objectContaining({ batch_id: held, status: 'validated', attempts: 0 }),
      ])
      expect(await h.store.fleet.findWorker(id)).toBeUndefined()
      expect(await hosted(h, id)).toEqual([])
      const n = async (sql: string) => Number((await h.one<{ n: unknown }>(sql)).n)
      expect(await n(`SELECT count(*) AS n FROM worker_runtimes WHERE worker_id = ${q(id)}`)).toBe(0)
      expect(await n(`SELECT count(*) AS n FROM worker_gpus WHERE worker_id = ${q(id)}`)).toBe(0)
      // The finished assignment stays as history; the held one went with the requeue.
      expect(await n(`SELECT count(*) AS n FROM batch_assignments WHERE worker_id = ${q(id)}`)).toBe(1)
      const entries = (await h.store.audit.page({ actions: ['worker.removed'] }, {})).rows
      expect(entries).toEqual([
        expect.objectContaining({
          target_kind: 'worker',
          target_id: id,
          org_id: 'org_a',
          details: { name: 'box', hostname: 'box.lab', key_id: null, requeued: [held] },
        }),
      ])
      // A heartbeat answered before the removal may still bring its inventory: it is dropped.
      await h.store.fleet.replaceInventory(id, [model('disk:2')], [], 'sig-late')
      expect(await hosted(h, id)).toEqual([])
      expect(await h.store.fleet.removeWorker('org_a', id, 301, SYSTEM_AUDIT)).toBeUndefined()
    })

    test('recordProgress: the holder rule, then counts that never go down nor exceed the total', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1')
      await worker(h, 'wrk_2')
      const b = await batch(h, { status: 'in_progress', holder: 'wrk_1', completed: 3 })
      const report = (o: Record<string, unknown> = {}) => ({
        workerId: 'wrk_1',
        jobId: b,
        assignmentId: undefined,
        total: undefined,
        completed: 5,
        failed: 1,
        now: 300,
        ...o,
      })
      expect((await appError(h.store.fleet.recordProgress(report({ workerId: 'wrk_2' })))).status).toBe(403)
      expect((await appError(h.store.fleet.recordProgress(report({ assignmentId: 'asg_old' })))).status).toBe(
        403,
      )
      expect((await appError(h.store.fleet.recordProgress(report({ jobId: 'batch_nope' })))).status).toBe(403)
      const decreased = await appError(h.store.fleet.recordProgress(report({ completed: 2 })))
      expect([decreased.status, decreased.errorCode]).toEqual([400, 'counts_decreased'])
      expect((await appError(h.store.fleet.recordProgress(report({ completed: 10 })))).errorCode).toBe(
        'counts_exceed_total',
      )
      expect((await appError(h.store.fleet.recordProgress(report({ total: 9 })))).errorCode).toBe(
        'total_mismatch',
      )
      await h.store.fleet.recordProgress(report({ assignmentId: `asg_${b}`, total: 10 }))
      expect(
        await h.one(
          `SELECT request_counts_completed AS c, request_counts_failed AS f, updated_at AS u FROM batches WHERE id = ${q(b)}`,
        ),
      ).toMatchObject({ c: 5, f: 1 })
      expect(Number((await h.one(`SELECT updated_at AS u FROM batches WHERE id = ${q(b)}`)).u)).toBe(300)
    })

    test('recordModelProgress: liveness; progress moves the ask, a finished download ends it', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { seen: 100, status: 'offline' })
      await h.exec(`INSERT INTO model_pulls (catalog_id, worker_id, runtime, runtime_model_id, asked_at, last_progress_at)
        VALUES ('m-a', 'wrk_1', 'ollama', 'a:1', 1, 1), ('m-b', 'wrk_1', 'ollama', 'b:1', 1, 1)`)
      const step = { progress_status: 'downloading' as const, completed_bytes: 5, total_bytes: 10 }
      await h.store.fleet.recordModelProgress('wrk_1', 'a:1', step, 150)
      expect(await h.store.fleet.findWorker('wrk_1')).toMatchObject({ status: 'online', last_seen_at: 150 })
      expect(
        (await h.store.fleet.pullsOfWorker('wrk_1'))
          .map((p) => [p.catalog_id, p.last_progress_at, p.progress_status, p.completed_bytes, p.total_bytes])
          .sort(),
      ).toEqual([
        ['m-a', 150, 'downloading', 5, 10],
        ['m-b', 1, null, null, null],
      ])
      await h.store.fleet.recordModelProgress('wrk_1', 'm-b', null, 160)
      expect((await h.store.fleet.pullsOfWorker('wrk_1')).map((p) => p.catalog_id)).toEqual(['m-a'])
    })

    test('listWorkers: newest first with child rows, one org or all, pages and cursors', async () => {
      h = await open()
      await seed(h)
      const ids: string[] = []
      for (const org of ['org_a', 'org_b', 'org_a']) {
        const r = await h.store.fleet.register(registration({ orgId: org }))
        if ('notOwned' in r) throw new Error('unexpected')
        ids.push(r.worker.id)
      }
      const mine = await h.store.fleet.listWorkers('org_a', {})
      expect(mine.rows.map((w) => w.id)).toEqual([ids[2], ids[0]])
      expect(mine.has_more).toBe(false)
      expect(mine.rows[0]!.gpus.map((g) => g.name)).toEqual(['RTX 4090'])
      expect(mine.rows[0]!.runtimes.map((r) => r.engine)).toEqual(['ollama'])
      expect(mine.rows[0]!.models.map((m) => m.name).sort()).toEqual(['cfg:1', 'disk:1'])
      const page = await h.store.fleet.listWorkers(null, { limit: 2 })
      expect(page.rows.map((w) => w.id)).toEqual([ids[2], ids[1]])
      expect(page.has_more).toBe(true)
      expect(
        (await h.store.fleet.listWorkers(null, { limit: 2, after: ids[1] })).rows.map((w) => w.id),
      ).toEqual([ids[0]])
      // Another org's id is an unknown cursor (existence never leaks).
      expect((await appError(h.store.fleet.listWorkers('org_a', { after: ids[1] }))).errorCode).toBe(
        'invalid_cursor',
      )
      expect((await appError(h.store.fleet.listWorkers('org_a', { limit: 0 }))).status).toBe(400)
    })

    test('matching reads: online workers after the cutoff, who hosts a name', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { seen: 100 })
      await worker(h, 'wrk_2', { seen: 50 })
      await worker(h, 'wrk_3', { seen: 100, status: 'offline' })
      await h.exec(
        `INSERT INTO worker_models (worker_id, name) VALUES ('wrk_1', 'x:1'), ('wrk_2', 'x:1'), ('wrk_3', 'y:1')`,
      )
      expect(await h.store.fleet.onlineWorkers(60)).toEqual([
        {
          id: 'wrk_1',
          org_id: 'org_a',
          last_heartbeat_at: null,
          vram_total_gb: 24,
          gpu_memory: [],
          last_seen_at: 100,
        },
      ])
      expect((await h.store.fleet.onlineWorkers(40)).map((w) => w.id).sort()).toEqual(['wrk_1', 'wrk_2'])
      const hosts = await h.store.fleet.hostsOf(['x:1', 'z:1', 'y:1'])
      expect([...hosts.keys()].sort()).toEqual(['x:1', 'y:1', 'z:1'])
      expect(hosts.get('x:1')!.sort()).toEqual(['wrk_1', 'wrk_2'])
      expect(hosts.get('y:1')).toEqual(['wrk_3'])
      expect(hosts.get('z:1')).toEqual([])
      expect((await h.store.fleet.hostsOf([])).size).toBe(0)
      expect(await h.store.fleet.workerHosting('wrk_3')).toEqual({
        engines: [],
        reported: {},
        models: [
          {
            name: 'y:1',
            runtime: null,
            digest: null,
            loaded: false,
            advertised: false,
            configured: false,
            on_disk: false,
          },
        ],
      })
    })

    test("reportedInventory: every worker's runtimes and hosted models, in seq order (catalogue discover)", async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1')
      await worker(h, 'wrk_2', { org: 'org_b' })
      await h.exec(`INSERT INTO worker_runtimes (worker_id, engine, base_url, status)
          VALUES ('wrk_2', 'vllm', 'http://x', 'online'), ('wrk_1', 'ollama', 'http://y', 'online');
        INSERT INTO worker_models (worker_id, name, runtime, runtime_model_id, digest, size_bytes)
          VALUES ('wrk_2', 'b', 'vllm', 'org/b', ${q(`${'a'.repeat(64)}`)}, 5000000000), ('wrk_1', 'a', NULL, NULL, NULL, NULL);`)
      expect(await h.store.fleet.reportedInventory()).toEqual({
        runtimes: [
          { worker_id: 'wrk_2', engine: 'vllm' },
          { worker_id: 'wrk_1', engine: 'ollama' },
        ],
        models: [
          {
            worker_id: 'wrk_2',
            name: 'b',
            runtime: 'vllm',
            runtime_model_id: 'org/b',
            digest: 'a'.repeat(64),
            size_bytes: 5_000_000_000,
          },
          {
            worker_id: 'wrk_1',
            name: 'a',
            runtime: null,
            runtime_model_id: null,
            digest: null,
            size_bytes: null,
          },
        ],
      })
    })

    test('pull asks: waiting batches, the current ask with its worker, drop, and at most one ask per entry under a race', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { seen: 100 })
      await worker(h, 'wrk_2', { seen: 90, status: 'offline' })
      await batch(h, { model: 'm-a', status: 'in_progress' })
      expect(await h.store.fleet.hasValidatedBatch(['m-a', 'old-a'])).toBe(false)
      await batch(h, { model: 'old-a' })
      expect(await h.store.fleet.hasValidatedBatch(['m-a', 'old-a'])).toBe(true)
      expect(await h.store.fleet.hasValidatedBatch([])).toBe(false)

      const ask = (workerId: string, at: number) => ({
        catalog_id: 'm-a',
        worker_id: workerId,
        runtime: 'ollama',
        runtime_model_id: 'a:1',
        asked_at: at,
        last_progress_at: at,
      })
      expect(await h.store.fleet.currentPull('m-a')).toBeUndefined()
      expect(await h.store.fleet.askPull(ask('wrk_2', 10), null)).toBe(true)
      expect(await h.store.fleet.currentPull('m-a')).toEqual({
        pull: { ...ask('wrk_2', 10), progress_status: null, completed_bytes: null, total_bytes: null },
        status: 'offline',
        last_seen_at: 90,
      })
      // Someone asked since the caller looked: it does not replace that ask.
      expect(await h.store.fleet.askPull(ask('wrk_1', 20), null)).toBe(false)
      expect(await h.store.fleet.askPull(ask('wrk_1', 20), 9)).toBe(false)
      // Many instances replacing the same lapsed ask at once: exactly one wins.
      const wins = await Promise.all(
        Array.from({ length: 8 }, (_, i) => h.store.fleet.askPull(ask('wrk_1', 30 + i), 10)),
      )
      expect(wins.filter(Boolean)).toHaveLength(1)
      expect((await h.store.fleet.pullsOfWorker('wrk_1')).map((p) => p.catalog_id)).toEqual(['m-a'])
      await h.store.fleet.dropPull('m-a', 'wrk_2') // not its ask: nothing happens
      expect(await h.store.fleet.currentPull('m-a')).toBeDefined()
      await h.store.fleet.dropPull('m-a', 'wrk_1')
      expect(await h.store.fleet.currentPull('m-a')).toBeUndefined()
      // No ask there at all: concurrent first asks, one wins.
      const first = await Promise.all(
        Array.from({ length: 8 }, (_, i) => h.store.fleet.askPull(ask('wrk_1', 40 + i), null)),
      )
      expect(first.filter(Boolean)).toHaveLength(1)
    })

    test('pool and gauge counts: online after the cutoff, idle, VRAM, GPUs; memberships; batches by status', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { seen: 100, vram: 24 })
      await worker(h, 'wrk_2', { seen: 100, activity: 'busy', vram: 48 })
      await worker(h, 'wrk_3', { seen: 50 }) // silent
      await worker(h, 'wrk_4', { seen: 100, status: 'offline' })
      await h.exec(
        `INSERT INTO worker_gpus (worker_id, name) VALUES ('wrk_1', 'g'), ('wrk_2', 'g'), ('wrk_2', 'g'), ('wrk_3', 'g')`,
      )
      expect(await h.store.fleet.capacityCounts(60)).toEqual({ online: 2, idle: 1, vram: 72 })
      expect(await h.store.fleet.gpusOnline(60)).toBe(3)
      expect(await h.store.fleet.capacityCounts(200)).toEqual({ online: 0, idle: 0, vram: 0 })
      expect(await h.store.fleet.gpusOnline(200)).toBe(0)
      expect((await h.store.fleet.orgIdsOf('user_a')).sort()).toEqual(['org_a', 'org_c'])
      expect(await h.store.fleet.orgIdsOf('user_b')).toEqual([])
      await batch(h)
      await batch(h)
      await batch(h, { status: 'failed' })
      const byStatus = Object.fromEntries((await h.store.fleet.batchCounts()).map((r) => [r.status, r.n]))
      expect(byStatus).toEqual({ validated: 2, failed: 1 })
      const workers = (await h.store.fleet.workerCounts(60))
        .map((r) => `${r.status}/${r.activity}=${r.n}`)
        .sort()
      expect(workers).toEqual(['offline/idle=2', 'online/busy=1', 'online/idle=1'])
    })
  })
}

describe('sqlite heartbeats', () => {
  test('beats that arrive together are committed together (one WAL commit, not one per beat)', async () => {
    const h = await storeEngines[0]![1]()
    try {
      await seed(h)
      const ids = Array.from({ length: 16 }, (_, i) => `wrk_${i}`)
      for (const id of ids) await worker(h, id)
      // Frames in the WAL after a truncating checkpoint = pages written by the commits since. Every
      // commit appends the page it changed, and the 16 rows share one page.
      await h.one('PRAGMA wal_checkpoint(TRUNCATE)')
      const answers = await Promise.all(ids.map((id) => h.store.fleet.heartbeat(beat(id))))
      expect(answers.every((a) => a !== null)).toBe(true)
      const wal = await h.one<{ log: number }>('PRAGMA wal_checkpoint(PASSIVE)')
      expect(wal.log).toBeGreaterThan(0)
      expect(wal.log).toBeLessThan(ids.length / 2)
      // Alone, a beat is its own commit.
      await h.one('PRAGMA wal_checkpoint(TRUNCATE)')
      for (const id of ids.slice(0, 4)) await h.store.fleet.heartbeat(beat(id, { now: 300 }))
      expect((await h.one<{ log: number }>('PRAGMA wal_checkpoint(PASSIVE)')).log).toBeGreaterThanOrEqual(4)
    } finally {
      await h.close()
    }
  })
})

describeWith(postgres, 'postgres heartbeats', () => {
  test('beats that arrive together are committed together (one transaction writes every row)', async () => {
    const h = await storeEngines[1]![1]()
    try {
      await seed(h)
      const ids = Array.from({ length: 8 }, (_, i) => `wrk_${i}`)
      for (const id of ids) await worker(h, id)
      // Steady beats (online, heartbeated, same VRAM): the group's own statements answer them all.
      await h.exec(`UPDATE workers SET last_heartbeat_at = 90`)
      const writers = async () =>
        (
          await h.all<{ id: string; xmin: string }>('SELECT id, xmin::text AS xmin FROM workers ORDER BY id')
        ).map((w) => w.xmin)
      const answers = await Promise.all(ids.map((id) => h.store.fleet.heartbeat(beat(id))))
      expect(answers.map((a) => a?.fitChanged)).toEqual(ids.map(() => false))
      // A row's xmin is the transaction that wrote it last.
      expect(new Set(await writers()).size).toBe(1)
      // Alone, a beat is its own transaction.
      for (const id of ids.slice(0, 2)) await h.store.fleet.heartbeat(beat(id, { now: 300 }))
      expect(new Set((await writers()).slice(0, 2)).size).toBe(2)
    } finally {
      await h.close()
    }
  })
})
