import { afterEach, expect, test } from 'bun:test'
import { describeEngine, lit as q, type StoreHarness, storeEngines } from '../helpers/stores'

// The work queue's verbs behave the same on SQLite and on PostgreSQL (docs/api.md §12).

type Harness = StoreHarness

/** A user, an org, and `workers` workers of that org, online and seen at `now`. */
async function seed(h: Harness, now: number, workers = 2) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);`)
  for (let i = 1; i <= workers; i++) {
    await h.exec(`INSERT INTO workers (id, org_id, name, status, activity, loaded_models, registered_at, last_seen_at)
      VALUES ('wrk_${i}', 'org_a', 'w${i}', 'online', 'idle', '[]', 1, ${now});`)
  }
}

let seq = 0
async function batch(h: Harness, model: string, status = 'validated', total = 4) {
  const id = `batch_${++seq}`
  await h.exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_total, created_at, updated_at)
    VALUES (${q(id)}, 'user_a', 'file-x', '/v1/chat/completions', '24h', ${q(model)}, ${q(status)}, ${total}, 1, 1);`)
  return id
}

const claim = (
  h: Harness,
  workerId: string,
  models: { model: string; loaded?: boolean }[],
  now = 100,
  max = 10,
) =>
  h.store.queue.claim({
    workerId,
    orgId: 'org_a',
    maxConcurrent: max,
    candidates: models.map((m) => ({ model: m.model, loaded: m.loaded ?? false, match: m.model })),
    now,
  })

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} engine`, () => {
    let h: Harness
    afterEach(async () => {
      await h?.close()
    })

    test('claim: the oldest validated batch of the candidate models, then in_progress with one assignment', async () => {
      h = await open()
      await seed(h, 100)
      await batch(h, 'm-other')
      const first = await batch(h, 'm-a')
      await batch(h, 'm-a')
      await batch(h, 'm-a', 'validating')
      const got = await claim(h, 'wrk_1', [{ model: 'm-a' }, { model: 'm-b' }])
      expect(got?.batch.id).toBe(first)
      expect(got?.batch.status).toBe('in_progress')
      expect(got?.batch.in_progress_at).toBe(100)
      expect(got?.match).toBe('m-a')
      const a = await h.one<{ worker_id: string; id: string; n: number }>(
        `SELECT worker_id, id, (SELECT count(*) FROM batch_assignments) AS n FROM batch_assignments WHERE batch_id = '${first}'`,
      )
      expect(a.worker_id).toBe('wrk_1')
      expect(a.id).toBe(got!.assignmentId)
      expect(Number(a.n)).toBe(1)
    })

    test('claim: the batch claimed is the row as stored, each column of its type', async () => {
      h = await open()
      await seed(h, 100)
      const id = await batch(h, 'm-a')
      await h.exec(`UPDATE batches SET metadata = '{"project": "alpha"}', usage = NULL WHERE id = '${id}'`)
      const got = await claim(h, 'wrk_1', [{ model: 'm-a' }])
      const stored = await h.store.batches.get(id, null)
      expect(got?.batch).toEqual(stored!)
      expect(got?.batch.metadata).toEqual({ project: 'alpha' })
      expect(typeof got?.batch.seq).toBe('number')
      expect(got?.batch.split).toBe(false)
    })

    test('claim: a loaded model first (docs/api.md §7 Poll rule 5), nothing for other models, the worker limit', async () => {
      h = await open()
      await seed(h, 100)
      await batch(h, 'm-old')
      const loaded = await batch(h, 'm-loaded')
      expect(
        (await claim(h, 'wrk_1', [{ model: 'm-old' }, { model: 'm-loaded', loaded: true }]))?.batch.id,
      ).toBe(loaded)
      expect(await claim(h, 'wrk_2', [{ model: 'm-none' }])).toBeNull()
      // wrk_1 holds one batch; with max 1 it gets nothing more.
      expect(await claim(h, 'wrk_1', [{ model: 'm-old' }], 100, 1)).toBeNull()
      expect(await claim(h, 'wrk_1', [{ model: 'm-old' }], 100, 2)).not.toBeNull()
    })

    test('claim: concurrent pollers never get the same batch', async () => {
      h = await open()
      await seed(h, 100, 8)
      const ids = new Set<string>()
      for (let i = 0; i < 40; i++) ids.add(await batch(h, i % 2 ? 'm-a' : 'm-b'))
      const claimed: string[] = []
      await Promise.all(
        Array.from({ length: 8 }, async (_, w) => {
          for (;;) {
            const got = await claim(h, `wrk_${w + 1}`, [{ model: 'm-a' }, { model: 'm-b' }], 100, 100)
            if (!got) return
            claimed.push(got.batch.id)
          }
        }),
      )
      expect(claimed.length).toBe(40)
      expect(new Set(claimed)).toEqual(ids)
    })

    test('report-failure: only the holder of the current assignment; attempts count up to terminal failed', async () => {
      h = await open()
      await seed(h, 100)
      const id = await batch(h, 'm-a', 'validated', 7)
      for (let attempt = 1; attempt <= 3; attempt++) {
        const got = await claim(h, 'wrk_1', [{ model: 'm-a' }])
        expect(got?.batch.id).toBe(id)
        await expect(
          h.store.queue.reportFailure({
            workerId: 'wrk_2',
            jobId: id,
            assignmentId: undefined,
            error: 'x',
            now: 101,
          }),
        ).rejects.toMatchObject({ status: 403, errorCode: 'not_assigned' })
        await expect(
          h.store.queue.reportFailure({
            workerId: 'wrk_1',
            jobId: id,
            assignmentId: 'asg_stale',
            error: 'x',
            now: 101,
          }),
        ).rejects.toMatchObject({ status: 403, errorCode: 'stale_assignment' })
        const outcome = await h.store.queue.reportFailure({
          workerId: 'wrk_1',
          jobId: id,
          assignmentId: got!.assignmentId,
          error: 'e'.repeat(3000),
          now: 101,
        })
        expect(outcome).toEqual({
          status: attempt < 3 ? 'validated' : 'failed',
          batch_id: id,
          attempts: attempt,
          error: 'e'.repeat(2000),
          model: 'm-a',
        })
      }
      const row = await h.one<Record<string, number | string>>(
        `SELECT status, attempts, request_counts_failed, completed_at, failed_at, (SELECT count(*) FROM batch_assignments) AS held FROM batches WHERE id = '${id}'`,
      )
      expect({ ...row, held: Number(row.held), completed_at: Number(row.completed_at) }).toMatchObject({
        status: 'failed',
        attempts: 3,
        request_counts_failed: 7,
        completed_at: 101,
        held: 0,
      })
      // An unknown batch is the same 403: a key learns nothing about batches it does not hold.
      await expect(
        h.store.queue.reportFailure({
          workerId: 'wrk_1',
          jobId: 'batch_nope',
          assignmentId: undefined,
          error: 'x',
          now: 1,
        }),
      ).rejects.toMatchObject({ status: 403 })
    })

    test('sweep: silent workers go offline, their batches are requeued once, their pull asks lapse', async () => {
      h = await open()
      await seed(h, 100)
      await h.exec(`UPDATE workers SET last_seen_at = 10 WHERE id = 'wrk_1'`)
      await h.exec(`INSERT INTO catalog_entries (id, display_name, created_at, updated_at) VALUES ('m-a', 'A', 1, 1);
        INSERT INTO model_pulls (catalog_id, worker_id, runtime, runtime_model_id, asked_at, last_progress_at)
          VALUES ('m-a', 'wrk_1', 'ollama', 'a', 1, 1);`)
      const held = await batch(h, 'm-a')
      const kept = await batch(h, 'm-b')
      expect((await claim(h, 'wrk_1', [{ model: 'm-a' }]))?.batch.id).toBe(held)
      expect((await claim(h, 'wrk_2', [{ model: 'm-b' }]))?.batch.id).toBe(kept)
      const swept = await h.store.queue.sweep(200, 80)
      expect(swept.workers_offline).toEqual(['wrk_1'])
      expect(swept.requeues).toEqual([
        {
          status: 'validated',
          batch_id: held,
          model: 'm-a',
          attempts: 1,
          error: 'worker wrk_1 went silent',
          reason: 'worker_silent',
        },
      ])
      expect(await h.one(`SELECT status, attempts FROM batches WHERE id = '${held}'`)).toEqual({
        status: 'validated',
        attempts: 1,
      })
      expect(await h.one(`SELECT status FROM batches WHERE id = '${kept}'`)).toEqual({
        status: 'in_progress',
      })
      expect(Number((await h.one<{ n: number }>('SELECT count(*) AS n FROM model_pulls')).n)).toBe(0)
      // A second pass finds nothing left to do.
      expect(await h.store.queue.sweep(200, 80)).toEqual({ workers_offline: [], requeues: [] })
    })

    test('tryRunEvery: one caller per interval, however many ask at once', async () => {
      h = await open()
      const first = await Promise.all(
        Array.from({ length: 8 }, () => h.store.queue.tryRunEvery('sweeper', 1000, 60)),
      )
      expect(first.filter(Boolean).length).toBe(1)
      expect(await h.store.queue.tryRunEvery('sweeper', 1059, 60)).toBe(false)
      expect(await h.store.queue.tryRunEvery('other', 1059, 60)).toBe(true)
      const later = await Promise.all(
        Array.from({ length: 8 }, () => h.store.queue.tryRunEvery('sweeper', 1060, 60)),
      )
      expect(later.filter(Boolean).length).toBe(1)
    })
  })
}
