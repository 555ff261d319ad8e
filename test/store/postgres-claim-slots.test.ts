import { afterAll, beforeAll, beforeEach, expect, test } from 'bun:test'
import type { ReservedSQL } from 'bun'
import { closePostgres, migratePostgres, openPostgres, type PgDb } from '../../src/store/postgres/db'
import { claimOne, postgresQueue } from '../../src/store/postgres/queue'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'

// The PostgreSQL claim is one autocommit statement (src/store/postgres/queue.ts claimOne): a
// worker's concurrent polls no longer take turns on a lock, so max_concurrent_jobs (docs/api.md §7)
// rests on the slots of batch_assignments_slot, and the order against a re-registration on the
// KEY SHARE lock the claim holds on the worker's row. Each test holds the other side open in a
// transaction and waits until PostgreSQL reports the claim waiting on it.

describeWith(postgres, 'postgres claim slots', () => {
  let db: PgDb
  const queue = () => postgresQueue(db, { MAX_BATCH_ATTEMPTS: 3 })

  beforeAll(async () => {
    db = openPostgres({ url: await freshPostgresUrl(), max: 8 })
    await migratePostgres(db)
    await db.$client.unsafe(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);
    INSERT INTO workers (id, org_id, name, status, activity, loaded_models, registered_at, last_seen_at)
      VALUES ('wrk_1', 'org_a', 'w1', 'online', 'idle', '[]', 1, 100);`)
  })

  beforeEach(async () => {
    await db.$client.unsafe(`
    DELETE FROM batch_assignments; DELETE FROM batches;
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      SELECT 'batch_' || g, 'user_a', 'file-x', '/v1/chat/completions', '24h', 'm-a', 'validated', 1, 1, 1
      FROM generate_series(1, 4) g;`)
  })

  afterAll(async () => {
    await closePostgres(db)
  })

  const claim = (max: number) =>
    queue().claim({
      workerId: 'wrk_1',
      orgId: 'org_a',
      maxConcurrent: max,
      candidates: [{ model: 'm-a', loaded: false, match: null }],
      now: 100,
    })

  /** Resolves once some statement of this database waits for a lock another transaction holds. */
  async function someoneWaitsForALock(settled: () => boolean) {
    for (;;) {
      const [row] = await db.$client`SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`
      if (row.n > 0 || settled()) return
      await Bun.sleep(5)
    }
  }

  /** `run` started while `tx` is open; true if it finished before `tx` ended. */
  async function alongside(tx: ReservedSQL, end: 'COMMIT' | 'ROLLBACK', run: () => Promise<unknown>) {
    let settled = false
    const pending = run().finally(() => {
      settled = true
    })
    await someoneWaitsForALock(() => settled)
    const finishedFirst = settled
    await tx.unsafe(end)
    return { result: await pending, finishedFirst }
  }

  const openAssignments = async () =>
    (
      await db.$client`SELECT count(*)::int AS n FROM batch_assignments
    WHERE worker_id = 'wrk_1' AND completed_at IS NULL`
    )[0].n as number

  test('postgres claim: two polls of one worker at once take one slot each, never more than max_concurrent_jobs', async () => {
    const tx = await db.$client.reserve()
    try {
      // Another poll of wrk_1 has claimed its slot 0 and not committed yet.
      await tx.unsafe('BEGIN')
      const [first] = await claimOne(
        tx,
        { model: 'm-a', needs: '', user_id: 'user_a', seq: 0 },
        { id: 'asg_first', workerId: 'wrk_1', orgId: 'org_a', now: 100, maxConcurrent: 1 },
      )
      expect(first.batch?.id).toBe('batch_1')
      // This poll's snapshot sees slot 0 free too: it waits for the other, then finds it taken.
      const { result, finishedFirst } = await alongside(tx, 'COMMIT', () => claim(1))
      expect(finishedFirst).toBe(false)
      expect(result).toBeNull()
      expect(await openAssignments()).toBe(1)
      // With room for two, the next poll takes slot 1.
      expect((await claim(2))?.batch.id).toBe('batch_2')
      const slots = await db.$client`SELECT slot FROM batch_assignments ORDER BY slot`
      expect(slots.map((r: { slot: number }) => r.slot)).toEqual([0, 1])
    } finally {
      tx.release()
    }
  })

  test('postgres claim: a slot another poll gave up is taken after all', async () => {
    const tx = await db.$client.reserve()
    try {
      await tx.unsafe('BEGIN')
      await claimOne(
        tx,
        { model: 'm-a', needs: '', user_id: 'user_a', seq: 0 },
        { id: 'asg_first', workerId: 'wrk_1', orgId: 'org_a', now: 100, maxConcurrent: 1 },
      )
      const { result, finishedFirst } = await alongside(tx, 'ROLLBACK', () => claim(1))
      expect(finishedFirst).toBe(false)
      expect((result as Awaited<ReturnType<typeof claim>>)?.batch.id).toBe('batch_2')
      expect(await openAssignments()).toBe(1)
    } finally {
      tx.release()
    }
  })

  test('postgres claim: a claim waits for a registration holding the worker, and a heartbeat does not wait for a claim', async () => {
    const tx = await db.$client.reserve()
    try {
      // POST /workers/register locks the worker's row first (src/store/postgres/fleet.ts).
      await tx.unsafe(`BEGIN; SELECT id FROM workers WHERE id = 'wrk_1' FOR UPDATE`)
      const { result, finishedFirst } = await alongside(tx, 'COMMIT', () => claim(1))
      expect(finishedFirst).toBe(false)
      expect((result as Awaited<ReturnType<typeof claim>>)?.batch.id).toBe('batch_1')
      // An uncommitted claim holds KEY SHARE: a heartbeat's UPDATE of the row goes through.
      await tx.unsafe('BEGIN')
      await claimOne(
        tx,
        { model: 'm-a', needs: '', user_id: 'user_a', seq: 0 },
        { id: 'asg_other', workerId: 'wrk_1', orgId: 'org_a', now: 100, maxConcurrent: 2 },
      )
      await db.$client`UPDATE workers SET last_seen_at = 101 WHERE id = 'wrk_1'`
      await tx.unsafe('COMMIT')
    } finally {
      tx.release()
    }
  })

  test('postgres claim: an assignment without a slot (older, or copied from SQLite) counts, and the lowest slot is taken', async () => {
    await db.$client.unsafe(`
    UPDATE batches SET status = 'in_progress' WHERE id = 'batch_4';
    INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at)
      VALUES ('asg_old', 'batch_4', 'wrk_1', 'org_a', 1);`)
    expect((await claim(2))?.batch.id).toBe('batch_1')
    const [taken] = await db.$client`SELECT slot FROM batch_assignments WHERE batch_id = 'batch_1'`
    expect(taken.slot).toBe(0)
    expect(await claim(2)).toBeNull()
    expect(await openAssignments()).toBe(2)
  })

  /** Open assignments of wrk_1 in `slots` (batches batch_11, batch_12, … in progress). */
  async function holding(slots: number[]) {
    await db.$client.unsafe(`
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      SELECT 'batch_' || (10 + g), 'user_a', 'file-x', '/v1/chat/completions', '24h', 'm-a', 'in_progress',
        1, 1, 1
      FROM generate_series(1, ${slots.length}) g;
    INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at, slot)
      SELECT 'asg_' || s.i, 'batch_' || (10 + s.i), 'wrk_1', 'org_a', 1, s.slot
      FROM unnest('{${slots.join(',')}}'::int[]) WITH ORDINALITY AS s(slot, i);`)
  }

  const openSlots = async () =>
    (
      await db.$client`SELECT slot FROM batch_assignments
      WHERE worker_id = 'wrk_1' AND completed_at IS NULL ORDER BY slot`
    ).map((r: { slot: number }) => r.slot)

  test('postgres claim: the slot above the highest taken while it is below the limit, then the free ones below it', async () => {
    // Slots 1 and 3 were given back (their jobs finished); the worker holds 0 and 2 of 5.
    await holding([0, 2])
    expect((await claim(5))?.batch.id).toBe('batch_1')
    expect(await openSlots()).toEqual([0, 2, 3])
    expect((await claim(5))?.batch.id).toBe('batch_2')
    expect(await openSlots()).toEqual([0, 2, 3, 4])
    // The highest is at the limit: the free slot below it.
    expect((await claim(5))?.batch.id).toBe('batch_3')
    expect(await openSlots()).toEqual([0, 1, 2, 3, 4])
    expect(await claim(5)).toBeNull()
  })

  test('postgres claim: twelve polls of one worker at once, with slots given back below its highest: exactly up to the limit', async () => {
    await db.$client.unsafe(`
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      SELECT 'batch_' || (100 + g), 'user_a', 'file-x', '/v1/chat/completions', '24h', 'm-a', 'validated',
        1, 1, 1
      FROM generate_series(1, 12) g;`)
    await holding([1, 3])
    const got = await Promise.all(Array.from({ length: 12 }, () => claim(4)))
    expect(got.filter((c) => c !== null)).toHaveLength(2)
    expect(await openSlots()).toEqual([0, 1, 2, 3])
  })

  test('postgres claim: an assignment without a slot lowers the bound of the slots', async () => {
    // Slot 0 held and one assignment without a slot, of 3: one more, in slot 1, and no slot 2.
    await holding([0])
    await db.$client.unsafe(`
    UPDATE batches SET status = 'in_progress' WHERE id = 'batch_4';
    INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at)
      VALUES ('asg_old', 'batch_4', 'wrk_1', 'org_a', 1);`)
    expect((await claim(3))?.batch.id).toBe('batch_1')
    expect(await claim(3)).toBeNull()
    expect(await openSlots()).toEqual([0, 1, null])
  })

  test('postgres claim: the claim takes only a batch with its head’s needs (docs/api.md §7 Poll rule 7)', async () => {
    // The owner's oldest batch needs json_mode; the head a worker without it read is batch_2.
    await db.$client`UPDATE batches SET needs = 'json_mode' WHERE id = 'batch_1'`
    const [got] = await claimOne(
      db.$client,
      { model: 'm-a', needs: '', user_id: 'user_a', seq: 0 },
      { id: 'asg_plain', workerId: 'wrk_1', orgId: 'org_a', now: 100, maxConcurrent: 2 },
    )
    expect(got.batch?.id).toBe('batch_2')
    const withJson = await queue().claim({
      workerId: 'wrk_1',
      orgId: 'org_a',
      maxConcurrent: 2,
      candidates: [{ model: 'm-a', loaded: false, match: null, needs: ['', 'json_mode'] }],
      now: 100,
    })
    expect(withJson?.batch.id).toBe('batch_1')
  })
})
