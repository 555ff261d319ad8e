import { afterEach, expect, test } from 'bun:test'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// docs/api.md §7: a worker already holding max_concurrent_jobs assignments gets nothing, also when its
// polls arrive at once (on PostgreSQL, on several connections of the pool).

async function seed(h: StoreHarness, batches: number) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);
    INSERT INTO workers (id, org_id, name, status, activity, loaded_models, registered_at, last_seen_at)
      VALUES ('wrk_1', 'org_a', 'w1', 'online', 'idle', '[]', 1, 100);`)
  for (let i = 1; i <= batches; i++)
    await h.exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      VALUES ('batch_${i}', 'user_a', 'file-x', '/v1/chat/completions', '24h', 'm-a', 'validated', 1, 1, 1);`)
}

const claim = (h: StoreHarness, workerId: string, max: number) =>
  h.store.queue.claim({
    workerId,
    orgId: 'org_a',
    maxConcurrent: max,
    candidates: [{ model: 'm-a', loaded: false, match: 'm-a' }],
    now: 100,
  })

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} engine: the worker limit`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('twelve polls of one worker at once, max_concurrent_jobs 3: exactly three claims', async () => {
      h = await open()
      await seed(h, 20)
      for (let round = 0; round < 3; round++) {
        await h.exec("DELETE FROM batch_assignments; UPDATE batches SET status = 'validated';")
        const got = await Promise.all(Array.from({ length: 12 }, () => claim(h, 'wrk_1', 3)))
        expect(got.filter((g) => g !== null).length).toBe(3)
        const held = await h.one<{ n: number }>(
          "SELECT count(*) AS n FROM batch_assignments WHERE worker_id = 'wrk_1' AND completed_at IS NULL",
        )
        expect(Number(held.n)).toBe(3)
        const running = await h.one<{ n: number }>(
          "SELECT count(*) AS n FROM batches WHERE status = 'in_progress'",
        )
        expect(Number(running.n)).toBe(3)
      }
    })

    test('a completed assignment frees its place', async () => {
      h = await open()
      await seed(h, 3)
      expect(await claim(h, 'wrk_1', 1)).not.toBeNull()
      expect(await claim(h, 'wrk_1', 1)).toBeNull()
      await h.exec('UPDATE batch_assignments SET completed_at = 100;')
      expect(await claim(h, 'wrk_1', 1)).not.toBeNull()
      const left = await h.one<{ n: number }>("SELECT count(*) AS n FROM batches WHERE status = 'validated'")
      expect(Number(left.n)).toBe(1)
    })
  })
}
