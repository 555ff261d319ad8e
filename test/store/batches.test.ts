import { afterEach, expect, test } from 'bun:test'
import { describeWith, postgres } from '../helpers/requires'
import { describeEngine, finishOne, type StoreHarness, storeEngines } from '../helpers/stores'

// The batches part behaves the same on SQLite and on PostgreSQL (docs/api.md §12).

async function seed(h: StoreHarness) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at) VALUES
      ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);
    INSERT INTO files (id, user_id, filename, purpose, bytes, created_at) VALUES
      ('file-a', 'user_a', 'a.jsonl', 'batch', 10, 1), ('file-out', 'user_a', 'o.jsonl', 'batch_output', 10, 1);`)
}

const newBatch = (id: string, user = 'user_a', file = 'file-a') => ({
  id,
  user_id: user,
  api_key_id: id === 'batch_1' ? 'key_1' : null,
  input_file_id: file,
  endpoint: '/v1/chat/completions',
  completion_window: '24h',
  metadata: { k: 'v' },
  now: 50,
})

const refuse = (file: { purpose: string } | undefined) => {
  if (!file) throw new Error('no file')
  if (file.purpose !== 'batch') throw new Error('wrong purpose')
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} batches`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('create checks the owner’s file inside the write and stores the batch as validating', async () => {
      h = await open()
      await seed(h)
      const row = await h.store.batches.create(newBatch('batch_1'), refuse)
      expect(row).toMatchObject({
        id: 'batch_1',
        status: 'validating',
        metadata: { k: 'v' },
        created_at: 50,
        attempts: 0,
        model: null,
        api_key_id: 'key_1',
      })
      await expect(h.store.batches.create(newBatch('batch_2', 'user_b'), refuse)).rejects.toThrow('no file')
      await expect(h.store.batches.create(newBatch('batch_3', 'user_a', 'file-out'), refuse)).rejects.toThrow(
        'wrong purpose',
      )
      expect((await h.one<{ n: number }>('SELECT CAST(count(*) AS INTEGER) AS n FROM batches')).n).toBe(1)
      // An insert that fails (a taken id) leaves nothing behind, and the next create goes through.
      await expect(h.store.batches.create(newBatch('batch_1'), refuse)).rejects.toThrow()
      for (let i = 4; i < 8; i++) await h.store.batches.create(newBatch(`batch_${i}`), refuse)
      expect((await h.one<{ n: number }>('SELECT CAST(count(*) AS INTEGER) AS n FROM batches')).n).toBe(5)
    })

    test('get is owner-scoped unless asked for any owner; page is newest first with a cursor and a filter', async () => {
      h = await open()
      await seed(h)
      for (let i = 1; i <= 5; i++) await h.store.batches.create(newBatch(`batch_${i}`), refuse)
      await h.exec(
        `INSERT INTO files (id, user_id, filename, purpose, bytes, created_at) VALUES ('file-b', 'user_b', 'b.jsonl', 'batch', 1, 1)`,
      )
      await h.store.batches.create(newBatch('batch_b', 'user_b', 'file-b'), refuse)
      expect((await h.store.batches.get('batch_1', 'user_a'))?.id).toBe('batch_1')
      expect(await h.store.batches.get('batch_1', 'user_b')).toBeNull()
      expect((await h.store.batches.get('batch_1', null))?.id).toBe('batch_1')
      const first = await h.store.batches.page({ ownerId: 'user_a' }, { limit: 2 })
      expect(first.rows.map((r) => r.id)).toEqual(['batch_5', 'batch_4'])
      expect(first.has_more).toBe(true)
      const rest = await h.store.batches.page({ ownerId: 'user_a' }, { limit: 10, after: 'batch_4' })
      expect(rest.rows.map((r) => r.id)).toEqual(['batch_3', 'batch_2', 'batch_1'])
      expect(rest.has_more).toBe(false)
      // Another user's id is not a cursor (its existence never leaks).
      await expect(h.store.batches.page({ ownerId: 'user_a' }, { after: 'batch_b' })).rejects.toMatchObject({
        status: 400,
      })
      expect((await h.store.batches.page({ ownerId: null }, {})).rows.length).toBe(6)
      expect((await h.store.batches.page({ ownerId: null, status: 'validated' }, {})).rows).toEqual([])
    })

    test('validation: lease, finish with stored errors in line order, and a stale finish changes nothing', async () => {
      h = await open()
      await seed(h)
      await h.store.batches.create(newBatch('batch_ok'), refuse)
      await h.store.batches.create(newBatch('batch_bad'), refuse)
      expect(await h.store.batches.validatingIds()).toEqual(['batch_ok', 'batch_bad'])
      // Several in one call; a batch that does not exist is left out.
      expect(
        (await h.store.batches.leaseValidations(['batch_ok', 'batch_none', 'batch_bad'], 'inst_a', 100, 160))
          .map((b) => b.id)
          .sort(),
      ).toEqual(['batch_bad', 'batch_ok'])
      const ok = await finishOne(
        h.store,
        'batch_ok',
        { passed: true, model: 'm', request_lines: 3, errors_total: 0, errors: [] },
        101,
      )
      expect(ok).toMatchObject({ status: 'validated', model: 'm', request_counts_total: 3 })
      const errors = [
        { code: 'invalid_json', line: 2, field: null, message: 'bad' },
        { code: 'missing_field', line: 5, field: 'custom_id', message: 'missing' },
      ]
      const bad = await finishOne(
        h.store,
        'batch_bad',
        { passed: false, model: null, request_lines: 5, errors_total: 7, errors },
        102,
      )
      expect(bad).toMatchObject({ status: 'failed', errors_total: 7, failed_at: 102, completed_at: 102 })
      expect(
        ((await h.store.batches.errorsOf(['batch_bad', 'batch_ok'])).get('batch_bad') ?? []).map((e) => ({
          code: e.code,
          line: e.line,
          field: e.field,
          message: e.message,
        })),
      ).toEqual(errors)
      // A second finish (a stale run) moves nothing and stores nothing.
      expect(
        await finishOne(
          h.store,
          'batch_bad',
          { passed: false, model: null, request_lines: 5, errors_total: 1, errors: [errors[0]!] },
          103,
        ),
      ).toBeNull()
      expect((await h.one<{ n: number }>('SELECT CAST(count(*) AS INTEGER) AS n FROM batch_errors')).n).toBe(
        2,
      )
      expect(await h.store.batches.validatingIds()).toEqual([])
      expect(await h.store.batches.leaseValidations(['batch_ok', 'batch_bad'], 'inst_a', 200, 260)).toEqual(
        [],
      )
    })

    test('several validations finish in one call: each moves or, if stale, writes nothing', async () => {
      h = await open()
      await seed(h)
      await h.exec(
        `INSERT INTO files (id, user_id, filename, purpose, bytes, created_at) VALUES ('file-b', 'user_b', 'b.jsonl', 'batch', 1, 1)`,
      )
      for (const id of ['batch_1', 'batch_2', 'batch_3']) await h.store.batches.create(newBatch(id), refuse)
      await h.store.batches.create(newBatch('batch_b', 'user_b', 'file-b'), refuse)
      // docs/api.md §13: each owner's listening webhooks get the events of its own moved batches.
      for (const [id, user, events] of [
        ['wh_a', 'user_a', ['batch.validated', 'batch.failed']],
        ['wh_b', 'user_b', ['batch.validated']],
        ['wh_b_failed_only', 'user_b', ['batch.failed']],
      ] as const)
        await h.store.webhooks.createWebhook({
          id,
          user_id: user,
          url: `http://127.0.0.1/${id}`,
          secret: `whsec_${id}`,
          events: [...events],
          created_at: 5,
        })
      await finishOne(
        h.store,
        'batch_3',
        { passed: true, model: 'm', request_lines: 1, errors_total: 0, errors: [] },
        90,
      )
      const error = { code: 'invalid_json', line: 1, field: null, message: 'bad' }
      const moved = await h.store.batches.finishValidations(
        [
          {
            batchId: 'batch_1',
            result: { passed: true, model: 'm', request_lines: 2, errors_total: 0, errors: [] },
          },
          {
            batchId: 'batch_2',
            result: { passed: false, model: null, request_lines: 1, errors_total: 1, errors: [error] },
          },
          // Already validated: a stale run's outcome, in the same group.
          {
            batchId: 'batch_3',
            result: { passed: false, model: null, request_lines: 1, errors_total: 1, errors: [error] },
          },
          {
            batchId: 'batch_b',
            result: { passed: true, model: 'm', request_lines: 4, errors_total: 0, errors: [] },
          },
        ],
        100,
      )
      expect(moved.map((r) => r && { id: r.id, status: r.status })).toEqual([
        { id: 'batch_1', status: 'validated' },
        { id: 'batch_2', status: 'failed' },
        null,
        { id: 'batch_b', status: 'validated' },
      ])
      expect(moved[0]).toMatchObject({
        model: 'm',
        request_counts_total: 2,
        errors_total: 0,
        updated_at: 100,
      })
      expect(moved[1]).toMatchObject({ model: null, errors_total: 1, failed_at: 100, completed_at: 100 })
      expect(moved[1]?.request_counts_total).toBe(0)
      expect(
        (
          await h.all<{ webhook_id: string; batch_id: string; type: string }>(
            'SELECT webhook_id, batch_id, type FROM webhook_messages ORDER BY batch_id, webhook_id',
          )
        ).map((m) => `${m.webhook_id} ${m.batch_id} ${m.type}`),
      ).toEqual([
        'wh_a batch_1 batch.validated',
        'wh_a batch_2 batch.failed',
        'wh_a batch_3 batch.validated',
        'wh_b batch_b batch.validated',
      ])
      const stored = await h.store.batches.errorsOf(['batch_1', 'batch_2', 'batch_3'])
      expect([...stored.keys()]).toEqual(['batch_2'])
      expect((await h.store.batches.get('batch_3', null))?.status).toBe('validated')
    })
  })
}

describeWith(postgres, 'postgres validation leases across instances', () => {
  test('one holder at a time; the holder renews; a lapsed lease is taken over', async () => {
    const h = await storeEngines.find(([kind]) => kind === 'postgres')![1]()
    try {
      await seed(h)
      await h.store.batches.create(newBatch('batch_1'), refuse)
      await h.store.batches.create(newBatch('batch_2'), refuse)
      const lease = async (holder: string, now: number, ids = ['batch_1']) =>
        (await h.store.batches.leaseValidations(ids, holder, now, now + 60)).map((b) => b.id).sort()
      expect(await lease('inst_a', 100)).toEqual(['batch_1'])
      expect(await lease('inst_b', 120)).toEqual([])
      expect(await lease('inst_a', 150)).toEqual(['batch_1'])
      // One statement for several: inst_b gets the free batch, not the one inst_a holds.
      expect(await lease('inst_b', 200, ['batch_1', 'batch_2'])).toEqual(['batch_2'])
      // inst_a crashed: its lease lapses and inst_b takes the batch over.
      expect(await lease('inst_b', 211)).toEqual(['batch_1'])
      expect(await lease('inst_a', 212, ['batch_1', 'batch_2'])).toEqual([])
    } finally {
      await h.close()
    }
  })
})
