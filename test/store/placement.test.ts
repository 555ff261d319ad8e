import { afterEach, expect, test } from 'bun:test'
import type { ModelDemand, Placement } from '../../src/domain/placement'
import { describeEngine, lit as q, type StoreHarness, storeEngines } from '../helpers/stores'

// docs/api.md §7 Placement inside the claim, on both engines: each engine reads the heads and each
// candidate model's longest wait (batches.queued_at) itself and ranks them by the one rule
// (domain/placement.ts); queued_at is stamped by validation and by a requeue; the figures the poll
// reads at most once a second (waitingWork, placementFleet) are the same on both.

const MAX_WAIT = 300
const T0 = 10_000

async function seed(h: StoreHarness) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);`)
}

async function worker(
  h: StoreHarness,
  id: string,
  o: { loads?: boolean; loaded?: string[]; seen?: number } = {},
) {
  await h.exec(`INSERT INTO workers (id, org_id, name, status, activity, loaded_models, loads, registered_at, last_seen_at)
    VALUES (${q(id)}, 'org_a', ${q(id)}, 'online', 'idle', ${q(JSON.stringify(o.loaded ?? []))},
      ${o.loads ? 'TRUE' : 'FALSE'}, 1, ${o.seen ?? T0});`)
}

let seq = 0
/** A batch of `model`; validated ones wait from `queuedAt`. */
async function batch(
  h: StoreHarness,
  model: string,
  o: { user?: string; queuedAt?: number | null; total?: number; status?: string } = {},
) {
  const id = `batch_${++seq}`
  await h.exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_total, created_at, updated_at, queued_at)
    VALUES (${q(id)}, ${q(o.user ?? 'user_a')}, 'file-x', '/v1/chat/completions', '24h', ${q(model)},
      ${q(o.status ?? 'validated')}, ${o.total ?? 4}, 1, 1,
      ${o.queuedAt === undefined ? T0 : o.queuedAt === null ? 'NULL' : o.queuedAt});`)
  return id
}

const demand = (d: Partial<ModelDemand>): ModelDemand => ({
  waiting: 0,
  serving: 0,
  rate: 0,
  ownRate: 100,
  loadSeconds: 3,
  ...d,
})

/** A worker with capabilities.loads among two, on `a`, with a long queue there and a tiny one of `b`. */
const busyOnA: Placement = {
  maxWaitSeconds: MAX_WAIT,
  spread: {
    workers: 2,
    totalWaiting: 10_004,
    demand: new Map([
      ['a', demand({ waiting: 10_000, serving: 1, rate: 100 })],
      ['b', demand({ waiting: 4 })],
    ]),
  },
}

const claim = (
  h: StoreHarness,
  workerId: string,
  now: number,
  placement: Placement | undefined,
  models = [
    { model: 'a', loaded: true },
    { model: 'b', loaded: false },
  ],
) =>
  h.store.queue.claim({
    workerId,
    orgId: 'org_a',
    maxConcurrent: 100,
    candidates: models.map((m) => ({ ...m, match: m.model, key: m.model })),
    now,
    placement,
  })

const claimId = async (...args: Parameters<typeof claim>) => (await claim(...args))?.batch.id

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} engine: placement (docs/api.md §7)`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('a stream of a batches does not starve a b batch: once it is overdue the next claim takes it, before the loaded model', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { loads: true })
      const b = await batch(h, 'b', { queuedAt: T0 })
      // Every 30 s a new a batch arrives and the worker, with a loaded, takes it: b is tiny.
      for (let now = T0; now < T0 + MAX_WAIT; now += 30) {
        const a = await batch(h, 'a', { queuedAt: now })
        expect(await claimId(h, 'wrk_1', now, busyOnA)).toBe(a)
      }
      // b has waited the setting: it goes first, although a batch of the loaded model waits too.
      await batch(h, 'a', { queuedAt: T0 + MAX_WAIT })
      expect(await claimId(h, 'wrk_1', T0 + MAX_WAIT, busyOnA)).toBe(b)
    })

    test('PLACEMENT=loaded_first (no placement): the same b batch waits as long as a work does', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { loads: true })
      const b = await batch(h, 'b', { queuedAt: T0 })
      for (let now = T0; now <= T0 + 3 * MAX_WAIT; now += 100) {
        const a = await batch(h, 'a', { queuedAt: now })
        expect(await claimId(h, 'wrk_1', now, undefined)).toBe(a)
      }
      // Only with no a work left does it run.
      expect(await claimId(h, 'wrk_1', T0 + 4 * MAX_WAIT, undefined)).toBe(b)
    })

    test("a model's longest wait is its longest-waiting batch, whichever owner and order; a batch without queued_at never ages", async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { loads: true })
      const now = T0 + MAX_WAIT
      await batch(h, 'a', { queuedAt: now })
      // b's first batch (by seq) is young; its second waited the setting: b is overdue.
      const young = await batch(h, 'b', { queuedAt: T0 + MAX_WAIT - 10 })
      await batch(h, 'b', { user: 'user_b', queuedAt: T0 })
      // Within b, fair share and the oldest decide (nobody runs anything: the lower seq).
      expect(await claimId(h, 'wrk_1', now, busyOnA)).toBe(young)
      // A b batch left waiting from before queued_at existed never makes b overdue: the loaded a first.
      await h.exec(`UPDATE batches SET status = 'completed' WHERE model = 'b' AND status = 'validated'`)
      await batch(h, 'b', { queuedAt: null })
      const later = now + 10 * MAX_WAIT
      const a = await batch(h, 'a', { queuedAt: later })
      await h.exec(`UPDATE batches SET status = 'completed' WHERE model = 'a' AND id <> ${q(a)}`)
      expect(await claimId(h, 'wrk_1', later, busyOnA)).toBe(a)
    })

    test('fair share still orders the owners within the overdue model', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { loads: true })
      const now = T0 + MAX_WAIT + 50
      await batch(h, 'a', { queuedAt: now })
      // user_a floods b (all overdue) and already runs one; user_b's single b batch is younger.
      await batch(h, 'b', { status: 'in_progress' })
      const flood = []
      for (let i = 0; i < 5; i++) flood.push(await batch(h, 'b', { queuedAt: T0 }))
      const single = await batch(h, 'b', { user: 'user_b', queuedAt: T0 + 50 })
      expect(await claimId(h, 'wrk_1', now, busyOnA)).toBe(single)
      expect(await claimId(h, 'wrk_1', now, busyOnA)).toBe(flood[0])
    })

    test('a worker that loads models declines work that does not pay while another serves it; takes it when nobody does', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1', { loads: true })
      const tiny = await batch(h, 'b', { total: 4 })
      const idle = (serving: number): Placement => ({
        maxWaitSeconds: MAX_WAIT,
        spread: {
          workers: 2,
          totalWaiting: 4,
          demand: new Map([['b', demand({ waiting: 4, serving, rate: 100 * serving })]]),
        },
      })
      // Nothing for its loaded a; b is tiny and another worker serves it: nothing claimed.
      expect(await claim(h, 'wrk_1', T0, idle(1))).toBeNull()
      // Nobody serves b: the idle worker takes it.
      expect(await claimId(h, 'wrk_1', T0, idle(0))).toBe(tiny)
    })

    test('queued_at: stamped when validation passes and when a requeue makes the batch wait again', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_1')
      const id = await batch(h, 'a', { status: 'validating', queuedAt: null })
      const [moved] = await h.store.batches.finishValidations(
        [
          {
            batchId: id,
            result: { passed: true, model: 'a', request_lines: 4, errors_total: 0, errors: [] },
          },
        ],
        T0 + 5,
      )
      expect(moved?.queued_at).toBe(T0 + 5)
      const held = await claim(h, 'wrk_1', T0 + 6, undefined, [{ model: 'a', loaded: true }])
      expect(held?.batch.id).toBe(id)
      await h.store.queue.reportFailure({
        workerId: 'wrk_1',
        jobId: id,
        assignmentId: held!.assignmentId,
        error: 'boom',
        now: T0 + 40,
      })
      const row = await h.one<{ status: string; queued_at: number }>(
        `SELECT status, queued_at FROM batches WHERE id = ${q(id)}`,
      )
      expect({ status: row.status, queued_at: Number(row.queued_at) }).toEqual({
        status: 'validated',
        queued_at: T0 + 40,
      })
    })

    test('waitingWork: requests per model — validated batches, the uncut rest of split ones and their waiting shards', async () => {
      h = await open()
      await seed(h)
      expect(await h.store.queue.waitingWork()).toEqual([])
      await batch(h, 'a', { total: 10, queuedAt: T0 + 5 })
      await batch(h, 'a', { total: 7, queuedAt: T0 })
      await batch(h, 'a', { total: 1000, status: 'in_progress' })
      await batch(h, 'a', { total: 50, status: 'completed' })
      await batch(h, 'b', { total: 3, queuedAt: null })
      // A split batch in progress: 600 of 1,000 cut, one 100-request shard waiting again.
      const split = await batch(h, 'c', { total: 1000, status: 'in_progress' })
      await h.exec(`UPDATE batches SET split = TRUE, next_request = 600 WHERE id = ${q(split)}`)
      // A failed split batch's waiting shards wait for nothing.
      const failed = await batch(h, 'c', { total: 500, status: 'failed' })
      await h.exec(`UPDATE batches SET split = TRUE, next_request = 500 WHERE id = ${q(failed)}`)
      let shard = 0
      for (const [b, status, requests] of [
        [split, 'waiting', 100],
        [split, 'running', 250],
        [failed, 'waiting', 500],
      ] as const) {
        await h.exec(`INSERT INTO batch_shards (id, batch_id, user_id, shard_index, first_request, requests, status, updated_at)
          VALUES ('shard_${++shard}', ${q(b)}, 'user_a', ${shard}, 0, ${requests}, '${status}', 1)`)
      }
      const got = (await h.store.queue.waitingWork()).sort((x, y) => x.model.localeCompare(y.model))
      expect(got.map((w) => ({ ...w, requests: Number(w.requests) }))).toEqual([
        { model: 'a', requests: 17 },
        { model: 'b', requests: 3 },
        { model: 'c', requests: 500 },
      ])
    })

    test('placementFleet: the online workers with capabilities.loads, what each has loaded or loading, its measurements and the models it holds', async () => {
      h = await open()
      await seed(h)
      await worker(h, 'wrk_loads', { loads: true, loaded: ['a:7b'] })
      await worker(h, 'wrk_fixed', { loaded: ['a:7b'] })
      await worker(h, 'wrk_silent', { loads: true, seen: T0 - 1000 })
      await h.exec(`UPDATE workers SET loading_models = ${q('["b:7b"]')},
          model_stats = ${q(JSON.stringify([{ name: 'a:7b', load_seconds: 3, requests_per_second: 200 }]))}
        WHERE id = 'wrk_loads'`)
      expect(await h.store.fleet.placementFleet(T0 - 100)).toEqual([
        {
          id: 'wrk_loads',
          loaded_models: ['a:7b'],
          loading_models: ['b:7b'],
          model_stats: [{ name: 'a:7b', load_seconds: 3, requests_per_second: 200 }],
          held: [],
        },
      ])
      // It holds a b batch, and a shard of a split c batch.
      await batch(h, 'b')
      expect(await claimId(h, 'wrk_loads', T0, undefined, [{ model: 'b', loaded: false }])).toBeDefined()
      const split = await batch(h, 'c', { status: 'in_progress' })
      await h.exec(`UPDATE batches SET split = TRUE WHERE id = ${q(split)};
        INSERT INTO batch_shards (id, batch_id, user_id, shard_index, first_request, requests, status, worker_id, updated_at)
          VALUES ('shard_held', ${q(split)}, 'user_a', 0, 0, 4, 'running', 'wrk_loads', 1)`)
      const [w] = await h.store.fleet.placementFleet(T0 - 100)
      expect(w?.held.sort()).toEqual(['b', 'c'])
    })
  })
}
