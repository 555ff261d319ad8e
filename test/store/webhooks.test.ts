import { Database } from 'bun:sqlite'
import { afterEach, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { migrate } from '../../src/db/migrate'
import { openDb } from '../../src/db/open'
import type { WebhookEventType } from '../../src/db/schema'
import { sqliteStore } from '../../src/store/sqlite'
import type { AttemptResult } from '../../src/store/webhooks'
import {
  clock,
  describeEngine,
  finishOne,
  lit as q,
  type StoreHarness,
  storeConfig,
  storeEngines,
} from '../helpers/stores'

// Webhooks' verbs and their outbox behave the same on SQLite and on PostgreSQL (docs/api.md §12, §13).

type Harness = StoreHarness

async function seed(h: Harness) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);
    INSERT INTO workers (id, org_id, name, status, activity, loaded_models, registered_at, last_seen_at)
      VALUES ('wrk_1', 'org_a', 'w1', 'online', 'idle', '[]', 1, 100);`)
}

let seq = 0
async function batch(h: Harness, status: string, user = 'user_a') {
  const id = `batch_${++seq}`
  await h.exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_total, created_at, updated_at)
    VALUES (${q(id)}, ${q(user)}, 'file-x', '/v1/chat/completions', '24h', 'm-a', ${q(status)}, 2, 1, 1);`)
  return id
}

const ALL: WebhookEventType[] = ['batch.validated', 'batch.completed', 'batch.failed']
const hook = (h: Harness, id: string, user = 'user_a', events = ALL) =>
  h.store.webhooks.createWebhook({
    id,
    user_id: user,
    url: `http://127.0.0.1/${id}`,
    secret: `whsec_${id}`,
    events,
    created_at: 5,
  })

const messages = async (h: Harness) =>
  (
    await h.all<{
      webhook_id: string
      batch_id: string
      type: string
      status: string
      next_attempt_at: number
    }>('SELECT webhook_id, batch_id, type, status, next_attempt_at FROM webhook_messages ORDER BY seq')
  ).map((m) => ({ ...m, next_attempt_at: Number(m.next_attempt_at) }))

const claim = (h: Harness, now = 100) =>
  h.store.queue.claim({
    workerId: 'wrk_1',
    orgId: 'org_a',
    maxConcurrent: 10,
    candidates: [{ model: 'm-a', loaded: false, match: null }],
    now,
  })

const passed = { passed: true, model: 'm-a', request_lines: 2, errors_total: 0, errors: [] }

type Msg = { id: string; webhook_id: string; batch_id: string; type: WebhookEventType }
function failedAttempt(m: Msg): AttemptResult {
  return {
    attempt: {
      id: `whd_${++seq}`,
      webhook_id: m.webhook_id,
      message_id: m.id,
      batch_id: m.batch_id,
      type: m.type,
      attempted_at: 200,
      outcome: 'failed',
      status_code: 500,
      error: 'HTTP 500',
      duration_ms: 3,
    },
    status: 'pending',
    next_attempt_at: 260,
  }
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} engine`, () => {
    let h: Harness
    afterEach(async () => {
      await h?.close()
    })

    test('create, list newest first, find and delete only the owner’s', async () => {
      h = await open()
      await seed(h)
      expect(await hook(h, 'wh_1')).toMatchObject({
        id: 'wh_1',
        user_id: 'user_a',
        secret: 'whsec_wh_1',
        events: ALL,
      })
      await hook(h, 'wh_2', 'user_a', ['batch.failed'])
      await hook(h, 'wh_b', 'user_b')
      const page = await h.store.webhooks.listWebhooks('user_a', { limit: 1 })
      expect(page.rows.map((r) => r.id)).toEqual(['wh_2'])
      expect(page.has_more).toBe(true)
      const next = await h.store.webhooks.listWebhooks('user_a', { after: 'wh_2' })
      expect(next.rows.map((r) => r.id)).toEqual(['wh_1'])
      expect((await h.store.webhooks.findWebhook('user_a', 'wh_2'))?.events).toEqual(['batch.failed'])
      expect(await h.store.webhooks.findWebhook('user_a', 'wh_b')).toBeUndefined()
      expect(await h.store.webhooks.deleteWebhook('user_a', 'wh_b')).toBe(false)
      expect(await h.store.webhooks.deleteWebhook('user_b', 'wh_b')).toBe(true)
      expect(await h.store.webhooks.findWebhook('user_b', 'wh_b')).toBeUndefined()
    })

    test('the outbox: validated, completed, failed (validation, report-failure, sweeper) for the owner’s listening webhooks', async () => {
      h = await open()
      await seed(h)
      await hook(h, 'wh_all')
      await hook(h, 'wh_failed', 'user_a', ['batch.failed'])
      await hook(h, 'wh_other_user', 'user_b')
      const ok = await batch(h, 'validating')
      const bad = await batch(h, 'validating')
      await finishOne(h.store, ok, passed, 50)
      await finishOne(
        h.store,
        bad,
        { passed: false, model: null, request_lines: 1, errors_total: 1, errors: [] },
        51,
      )
      expect(await messages(h)).toEqual([
        {
          webhook_id: 'wh_all',
          batch_id: ok,
          type: 'batch.validated',
          status: 'pending',
          next_attempt_at: 50,
        },
        { webhook_id: 'wh_all', batch_id: bad, type: 'batch.failed', status: 'pending', next_attempt_at: 51 },
        {
          webhook_id: 'wh_failed',
          batch_id: bad,
          type: 'batch.failed',
          status: 'pending',
          next_attempt_at: 51,
        },
      ])
      // A stale validation run changes nothing and writes nothing.
      expect(await finishOne(h.store, ok, passed, 52)).toBeNull()
      expect((await messages(h)).length).toBe(3)
      await h.exec('DELETE FROM webhook_messages')

      // A claim and a requeue send nothing; completion does.
      let got = await claim(h)
      expect(got?.batch.id).toBe(ok)
      await h.store.queue.reportFailure({
        workerId: 'wrk_1',
        jobId: ok,
        assignmentId: got!.assignmentId,
        error: 'x',
        now: 101,
      })
      expect(await messages(h)).toEqual([])
      got = await claim(h)
      await h.store.queue.recordResults({
        batchId: ok,
        workerId: 'wrk_1',
        assignmentId: got!.assignmentId,
        changes: { completed_at: 102, request_counts_completed: 2 },
        files: [],
        now: 102,
      })
      expect(await messages(h)).toEqual([
        {
          webhook_id: 'wh_all',
          batch_id: ok,
          type: 'batch.completed',
          status: 'pending',
          next_attempt_at: 102,
        },
      ])
      await h.exec('DELETE FROM webhook_messages')

      // The last attempt failing, by report-failure and by the sweeper.
      const reported = await batch(h, 'validated')
      await h.exec(`UPDATE batches SET attempts = 2 WHERE id = '${reported}'`)
      got = await claim(h)
      await h.store.queue.reportFailure({
        workerId: 'wrk_1',
        jobId: reported,
        assignmentId: got!.assignmentId,
        error: 'x',
        now: 103,
      })
      const swept = await batch(h, 'validated')
      await h.exec(`UPDATE batches SET attempts = 2 WHERE id = '${swept}'`)
      await claim(h)
      await h.exec(`UPDATE workers SET last_seen_at = 10 WHERE id = 'wrk_1'`)
      expect((await h.store.queue.sweep(200, 80)).requeues.map((r) => r.status)).toEqual(['failed'])
      expect((await messages(h)).map((m) => [m.webhook_id, m.batch_id, m.type])).toEqual([
        ['wh_all', reported, 'batch.failed'],
        ['wh_failed', reported, 'batch.failed'],
        ['wh_all', swept, 'batch.failed'],
        ['wh_failed', swept, 'batch.failed'],
      ])
    })

    test('the outbox row commits with the transition or not at all', async () => {
      h = await open()
      await seed(h)
      await hook(h, 'wh_all')
      await h.exec(`INSERT INTO files (id, user_id, filename, purpose, bytes, created_at)
        VALUES ('file-taken', 'user_a', 'x', 'batch_output', 1, 1)`)
      const id = await batch(h, 'validated')
      const got = await claim(h)
      // The output file's record collides: the whole upload-results transaction rolls back.
      await expect(
        h.store.queue.recordResults({
          batchId: id,
          workerId: 'wrk_1',
          assignmentId: got!.assignmentId,
          changes: { completed_at: 102 },
          files: [
            {
              id: 'file-taken',
              user_id: 'user_a',
              filename: 'o',
              purpose: 'batch_output',
              bytes: 1,
              created_at: 102,
              batch_id: id,
            },
          ],
          now: 102,
        }),
      ).rejects.toThrow()
      expect(await h.one(`SELECT status FROM batches WHERE id = '${id}'`)).toEqual({ status: 'in_progress' })
      expect(await messages(h)).toEqual([])
    })

    test('leasing: due messages once, a lapsed lease again; a lost lease records nothing', async () => {
      h = await open()
      await seed(h)
      await hook(h, 'wh_all')
      const early = await batch(h, 'validating')
      const late = await batch(h, 'validating')
      await finishOne(h.store, early, passed, 50)
      await finishOne(h.store, late, passed, 70)
      const first = await h.store.webhooks.leaseDue(60, 90, 'lease-1', 10)
      expect(first.map((m) => [m.batch_id, m.url, m.secret, m.attempts, m.created_at, m.type])).toEqual([
        [early, 'http://127.0.0.1/wh_all', 'whsec_wh_all', 0, 50, 'batch.validated'],
      ])
      // Leased: not due again before the lease lapses, whoever asks.
      const [other] = await h.store.webhooks.leaseDue(80, 110, 'lease-2', 10)
      expect(other?.batch_id).toBe(late)
      const delivered = (m: Msg): AttemptResult => {
        const r = failedAttempt(m)
        r.attempt = { ...r.attempt, outcome: 'delivered', status_code: 204, error: null }
        return { ...r, status: 'delivered', next_attempt_at: null }
      }
      expect(await h.store.webhooks.recordAttempt(other!.id, 'lease-2', delivered(other!))).toBe(true)
      const retaken = await h.store.webhooks.leaseDue(95, 125, 'lease-3', 10)
      expect(retaken.map((m) => m.batch_id)).toEqual([early])
      // The first deliverer's lease was lost: its record is refused, the new holder's kept.
      const m = first[0]!
      expect(await h.store.webhooks.recordAttempt(m.id, 'lease-1', failedAttempt(m))).toBe(false)
      expect(await h.store.webhooks.recordAttempt(m.id, 'lease-3', failedAttempt(m))).toBe(true)
      const row = await h.one<Record<string, unknown>>(
        `SELECT status, attempts, next_attempt_at, lease FROM webhook_messages WHERE id = '${m.id}'`,
      )
      expect({ ...row, next_attempt_at: Number(row.next_attempt_at) } as Record<string, unknown>).toEqual({
        status: 'pending',
        attempts: 1,
        next_attempt_at: 260,
        lease: null,
      })
      expect(await h.store.webhooks.leaseDue(259, 300, 'lease-4', 10)).toEqual([])
      const again = await h.store.webhooks.leaseDue(260, 300, 'lease-5', 10)
      expect(again.map((x) => [x.id, x.attempts])).toEqual([[m.id, 1]])
      expect(await h.store.webhooks.recordAttempt(m.id, 'lease-5', delivered(m))).toBe(true)
      expect(await h.store.webhooks.leaseDue(10_000, 10_030, 'lease-6', 10)).toEqual([])
      const log = await h.store.webhooks.listAttempts('wh_all', {})
      expect(log.rows.map((a) => [a.message_id, a.outcome, a.status_code, a.type, a.batch_id])).toEqual([
        [m.id, 'delivered', 204, 'batch.validated', early],
        [m.id, 'failed', 500, 'batch.validated', early],
        [other!.id, 'delivered', 204, 'batch.validated', late],
      ])
    })

    test('a limit bounds one lease; deleting a webhook takes its outbox and log with it', async () => {
      h = await open()
      await seed(h)
      await hook(h, 'wh_all')
      for (let i = 0; i < 3; i++) await finishOne(h.store, await batch(h, 'validating'), passed, 50 + i)
      const two = await h.store.webhooks.leaseDue(60, 90, 'lease-1', 2)
      expect(two.map((m) => m.created_at)).toEqual([50, 51])
      expect(await h.store.webhooks.recordAttempt(two[0]!.id, 'lease-1', failedAttempt(two[0]!))).toBe(true)
      expect(await h.store.webhooks.deleteWebhook('user_a', 'wh_all')).toBe(true)
      expect(await messages(h)).toEqual([])
      expect(await h.all('SELECT id FROM webhook_attempts')).toEqual([])
    })
  })
}

describe('sqlite webhook leasing', () => {
  test('a pass with nothing due takes no write lock: it answers while another connection writes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gridkeep-store-'))
    const path = join(dir, 'g.db')
    const { db, sqlite } = openDb({ path })
    migrate(db)
    const store = sqliteStore({ db, sqlite, config: storeConfig(), clock })
    const writer = new Database(path)
    try {
      writer.exec('PRAGMA busy_timeout = 0; BEGIN IMMEDIATE')
      // A BEGIN IMMEDIATE here would wait out busy_timeout and fail with SQLITE_BUSY.
      expect(await store.webhooks.leaseDue(60, 90, 'lease-1', 10)).toEqual([])
      writer.exec('ROLLBACK')
    } finally {
      writer.close()
      await store.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
