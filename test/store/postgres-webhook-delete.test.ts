import { afterAll, beforeAll, expect, test } from 'bun:test'
import { SQL } from 'bun'
import { manualClock } from '../../src/lib/clock'
import { postgresStore } from '../../src/store/postgres'
import { migratePostgres, openPostgres } from '../../src/store/postgres/db'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'
import { finishOne, storeConfig } from '../helpers/stores'

// PostgreSQL, several writers at once: a webhook deleted while a batch transition writes its
// outbox row. The transition waits for the delete and writes nothing for the deleted webhook; it
// never fails on the outbox row's foreign key (which would fail a worker's upload).

describeWith(postgres, 'postgres webhook delete', () => {
  let store: ReturnType<typeof postgresStore>
  let other: SQL
  beforeAll(async () => {
    const url = await freshPostgresUrl()
    const db = openPostgres({ url, max: 4 })
    await migratePostgres(db)
    store = postgresStore(db, storeConfig(), 'inst_test', manualClock())
    other = new SQL({ url, max: 2 })
  })
  afterAll(async () => {
    await other.close()
    await store.close()
  })

  test('a transition racing a webhook delete waits for it and writes no orphan outbox row', async () => {
    await other.unsafe(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at) VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1);
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, status, created_at, updated_at)
      VALUES ('batch_1', 'user_a', 'file-x', '/v1/chat/completions', '24h', 'validating', 1, 1);`)
    await store.webhooks.createWebhook({
      id: 'wh_gone',
      user_id: 'user_a',
      url: 'http://127.0.0.1/',
      secret: 'whsec_x',
      events: ['batch.validated'],
      created_at: 1,
    })
    const deleting = await other.reserve()
    try {
      await deleting`BEGIN`
      await deleting`DELETE FROM webhooks WHERE id = 'wh_gone'`
      const transition = finishOne(
        store,
        'batch_1',
        { passed: true, model: 'm', request_lines: 1, errors_total: 0, errors: [] },
        50,
      )
      // The transition is blocked on the deleted row's lock before the delete commits.
      for (;;) {
        const [row] = await other`SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`
        if (row.n > 0) break
        await Bun.sleep(10)
      }
      await deleting`COMMIT`
      expect((await transition)?.status).toBe('validated')
    } finally {
      deleting.release()
    }
    expect(await other`SELECT id FROM webhook_messages`).toEqual([])
  })
})
