import { afterEach, expect, test } from 'bun:test'
import { describeEngine, lit as q, type StoreHarness, storeEngines } from '../helpers/stores'

// docs/api.md §14 fair share, on both engines: after docs/api.md §7 Poll rule 5 (a loaded model first), the owner
// with the fewest batches in progress goes first, then the oldest batch. The counts are read from
// the batches themselves, so a requeue, a completion or a failure moves them at once.

const USERS = ['user_a', 'user_b', 'user_c']

async function seed(h: StoreHarness, workers = 4) {
  for (const u of USERS) {
    await h.exec(`INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES (${q(u)}, ${q(`${u}@x.test`)}, 'h', ${q(u)}, 1, 1);`)
  }
  await h.exec(`INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);`)
  for (let i = 1; i <= workers; i++) {
    await h.exec(`INSERT INTO workers (id, org_id, name, status, activity, loaded_models, registered_at, last_seen_at)
      VALUES ('wrk_${i}', 'org_a', 'w${i}', 'online', 'idle', '[]', 1, 100);`)
  }
}

let seq = 0
/** `count` batches of `user`, in statements of 500; their ids in seq order. */
async function batches(h: StoreHarness, user: string, model: string, count = 1, status = 'validated') {
  const ids = Array.from({ length: count }, () => `batch_${++seq}`)
  const rows = ids.map(
    (id) =>
      `(${q(id)}, ${q(user)}, 'file-x', '/v1/chat/completions', '24h', ${q(model)}, ${q(status)}, 1, 1, 1)`,
  )
  for (let i = 0; i < rows.length; i += 500) {
    await h.exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at) VALUES ${rows.slice(i, i + 500).join(', ')};`)
  }
  return ids
}

const claim = (h: StoreHarness, workerId: string, models: { model: string; loaded?: boolean }[]) =>
  h.store.queue.claim({
    workerId,
    orgId: 'org_a',
    maxConcurrent: 10_000,
    candidates: models.map((m) => ({ model: m.model, loaded: m.loaded ?? false, match: m.model })),
    now: 100,
  })

const claimId = async (h: StoreHarness, workerId: string, models: { model: string; loaded?: boolean }[]) =>
  (await claim(h, workerId, models))?.batch.id

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} engine: fair share (docs/api.md §14)`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test("user A's 1,000 queued batches do not starve B's one: it is among the next two claims", async () => {
      h = await open()
      await seed(h)
      const a = await batches(h, 'user_a', 'm-a', 1000)
      const [b] = await batches(h, 'user_b', 'm-a')
      const next = [
        await claimId(h, 'wrk_1', [{ model: 'm-a' }]),
        await claimId(h, 'wrk_2', [{ model: 'm-a' }]),
      ]
      // Neither has anything in progress: A's older batch first, then B's (A now runs one).
      expect(next).toEqual([a[0], b])
      // Then A's queue drains in order.
      expect(await claimId(h, 'wrk_3', [{ model: 'm-a' }])).toBe(a[1])
    })

    test('the owner with fewer batches in progress first, across models; equal counts: the oldest batch', async () => {
      h = await open()
      await seed(h)
      await batches(h, 'user_a', 'm-a', 2, 'in_progress')
      await batches(h, 'user_b', 'm-b', 1, 'in_progress')
      const [a1] = await batches(h, 'user_a', 'm-a', 2)
      const [b1, b2] = await batches(h, 'user_b', 'm-b', 2)
      const [c1, c2] = await batches(h, 'user_c', 'm-a', 2)
      const models = [{ model: 'm-a' }, { model: 'm-b' }]
      // Running: A 2, B 1, C 0 → C's oldest; then B and C tie at 1 → B's batch is older.
      expect(await claimId(h, 'wrk_1', models)).toBe(c1)
      expect(await claimId(h, 'wrk_1', models)).toBe(b1)
      // A 2, B 2, C 1 → C again, although A's and B's waiting batches are older.
      expect(await claimId(h, 'wrk_1', models)).toBe(c2)
      // All run 2 now: the oldest waiting batch, A's; then B (2) before A (3).
      expect(await claimId(h, 'wrk_1', models)).toBe(a1)
      expect(await claimId(h, 'wrk_1', models)).toBe(b2)
    })

    test('a model already loaded still goes first (docs/api.md §7 Poll rule 5), whoever owns it', async () => {
      h = await open()
      await seed(h)
      await batches(h, 'user_a', 'm-loaded', 5, 'in_progress')
      const [idle] = await batches(h, 'user_b', 'm-cold')
      const [busy] = await batches(h, 'user_a', 'm-loaded')
      const models = [{ model: 'm-cold' }, { model: 'm-loaded', loaded: true }]
      expect(await claimId(h, 'wrk_1', models)).toBe(busy)
      expect(await claimId(h, 'wrk_1', models)).toBe(idle)
    })

    test('the counts follow failures, completions and the sweeper', async () => {
      h = await open()
      await seed(h)
      const [b1, b2] = await batches(h, 'user_b', 'm-a', 2)
      const [a1, a2] = await batches(h, 'user_a', 'm-a', 2)
      // B's b1 (oldest, nobody runs anything), then A's a1 (A 0 < B 1).
      expect(await claimId(h, 'wrk_1', [{ model: 'm-a' }])).toBe(b1)
      const held = await claim(h, 'wrk_2', [{ model: 'm-a' }])
      expect(held?.batch.id).toBe(a1)
      // A's run fails: a1 is requeued and A runs nothing; B runs b1 → A's a1 again, before B's b2.
      await h.store.queue.reportFailure({
        workerId: 'wrk_2',
        jobId: a1!,
        assignmentId: held!.assignmentId,
        error: 'boom',
        now: 101,
      })
      expect(await claimId(h, 'wrk_2', [{ model: 'm-a' }])).toBe(a1)
      // Another batch of A's; B completes b1: B 0, A 1 → B's b2 before A's older a2.
      const [b3] = await batches(h, 'user_b', 'm-a')
      const { assignment } = await h.store.queue.batchWithAssignment(b1!)
      await h.store.queue.recordResults({
        batchId: b1!,
        workerId: 'wrk_1',
        assignmentId: assignment!.id,
        changes: { completed_at: 102, request_counts_completed: 1 },
        files: [],
        now: 102,
      })
      expect(await claimId(h, 'wrk_3', [{ model: 'm-a' }])).toBe(b2)
      // A 1, B 1: the oldest, A's a2; then B's b3.
      expect(await claimId(h, 'wrk_3', [{ model: 'm-a' }])).toBe(a2)
      // The sweeper requeues silent workers' batches: everyone runs nothing, the oldest (b2) first.
      const swept = await h.store.queue.sweep(1000, 500)
      expect(swept.requeues.map((r) => r.batch_id).sort()).toEqual([a1, a2, b2].sort())
      expect(await claimId(h, 'wrk_4', [{ model: 'm-a' }])).toBe(b2)
      // B 1, A 0 → A's a1, then a2 (A 1, B 1; a2 older than b3).
      expect(await claimId(h, 'wrk_4', [{ model: 'm-a' }])).toBe(a1)
      expect(await claimId(h, 'wrk_4', [{ model: 'm-a' }])).toBe(a2)
      expect(await claimId(h, 'wrk_4', [{ model: 'm-a' }])).toBe(b3)
    })

    test('queuedByOwnerClass: waiting batches of owners with nothing in progress, and of owners running some', async () => {
      h = await open()
      await seed(h)
      expect(await h.store.queue.queuedByOwnerClass()).toEqual({ idle: 0, running: 0 })
      await batches(h, 'user_a', 'm-a', 3)
      await batches(h, 'user_b', 'm-b', 2)
      await batches(h, 'user_c', 'm-a', 1, 'completed')
      expect(await h.store.queue.queuedByOwnerClass()).toEqual({ idle: 5, running: 0 })
      // A's claim: A runs one and waits with two.
      await claim(h, 'wrk_1', [{ model: 'm-a' }])
      expect(await h.store.queue.queuedByOwnerClass()).toEqual({ idle: 2, running: 2 })
    })

    test('concurrent pollers over several owners never get the same batch, and each owner is served early', async () => {
      h = await open()
      await seed(h, 8)
      const ids = new Set<string>()
      for (const u of USERS) for (const id of await batches(h, u, 'm-a', 20)) ids.add(id)
      const claimed: string[] = []
      await Promise.all(
        Array.from({ length: 8 }, async (_, w) => {
          for (;;) {
            const got = await claim(h, `wrk_${w + 1}`, [{ model: 'm-a' }])
            if (!got) return
            claimed.push(got.batch.id)
          }
        }),
      )
      expect(claimed.length).toBe(60)
      expect(new Set(claimed)).toEqual(ids)
      // Every owner had a share of the first 30 claims (without fair share, A's 20 came first).
      const owners = await h.all<{ user_id: string; id: string }>(`SELECT user_id, id FROM batches`)
      const ownerOf = new Map(owners.map((o) => [o.id, o.user_id]))
      const first = claimed.slice(0, 30).map((id) => ownerOf.get(id))
      for (const u of USERS) expect(first.filter((o) => o === u).length).toBeGreaterThanOrEqual(5)
    })
  })
}
