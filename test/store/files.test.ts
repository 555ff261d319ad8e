import { afterEach, expect, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// The files part behaves the same on SQLite and on PostgreSQL (docs/api.md §12): expiry, the quota's
// sums and the retention pass of docs/api.md §15.

async function seed(h: StoreHarness) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at) VALUES
      ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);`)
}

const file = (
  id: string,
  o: { user?: string; bytes?: number; expires_at?: number | null; out?: boolean } = {},
) => ({
  id,
  user_id: o.user ?? 'user_a',
  filename: `${id}.jsonl`,
  purpose: o.out ? ('batch_output' as const) : ('batch' as const),
  bytes: o.bytes ?? 10,
  created_at: 100,
  expires_at: o.expires_at ?? null,
})

const batchOn = (id: string, input: string, status: string) =>
  `INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, status, created_at, updated_at)
   VALUES ('${id}', 'user_a', '${input}', '/v1/chat/completions', '24h', '${status}', 1, 1)`

const ids = (rows: { id: string }[]) => rows.map((r) => r.id).sort()

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} files`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('a file is gone for get and page from its expires_at on, and kept before', async () => {
      h = await open()
      await seed(h)
      await h.store.files.insert(file('file-forever'))
      await h.store.files.insert(file('file-later', { expires_at: 200 }))
      expect((await h.store.files.get('file-later', 'user_a', 199))?.expires_at).toBe(200)
      expect(await h.store.files.get('file-later', 'user_a', 200)).toBeNull()
      expect(await h.store.files.get('file-later', null, 200)).toBeNull()
      const at = async (now: number) =>
        ids((await h.store.files.page({ ownerId: 'user_a', now }, { limit: 20 })).rows)
      expect(await at(199)).toEqual(['file-forever', 'file-later'])
      expect(await at(200)).toEqual(['file-forever'])
    })

    test('stored bytes: per owner (every file they own) and by purpose', async () => {
      h = await open()
      await seed(h)
      expect(await h.store.files.storedBytes('user_a')).toBe(0)
      await h.store.files.insert(file('file-1', { bytes: 100 }))
      await h.store.files.insert(file('file-2', { bytes: 30, out: true }))
      await h.store.files.insert(file('file-3', { bytes: 7, user: 'user_b' }))
      expect(await h.store.files.storedBytes('user_a')).toBe(130)
      expect(await h.store.files.storedBytes('user_b')).toBe(7)
      const byPurpose = await h.store.files.storedBytesByPurpose()
      expect(byPurpose.sort((x, y) => x.purpose.localeCompare(y.purpose))).toEqual([
        { purpose: 'batch', bytes: 107 },
        { purpose: 'batch_output', bytes: 30 },
      ])
    })

    test('insertWithinQuota records a file that fits exactly and refuses one byte more', async () => {
      h = await open()
      await seed(h)
      await h.store.files.insert(file('file-1', { bytes: 60 }))
      expect(await h.store.files.insertWithinQuota(file('file-2', { bytes: 41 }), 100)).toBeNull()
      expect(await h.store.files.get('file-2', null, 0)).toBeNull()
      expect((await h.store.files.insertWithinQuota(file('file-3', { bytes: 40 }), 100))?.id).toBe('file-3')
      // Another owner's bytes do not count.
      const other = await h.store.files.insertWithinQuota(file('file-4', { bytes: 100, user: 'user_b' }), 100)
      expect(other?.id).toBe('file-4')
    })

    test('concurrent uploads of one owner cannot both take the last room', async () => {
      h = await open()
      await seed(h)
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          h.store.files.insertWithinQuota(file(`file-${i}`, { bytes: 60 }), 100),
        ),
      )
      expect(results.filter((r) => r !== null)).toHaveLength(1)
      expect(await h.store.files.storedBytes('user_a')).toBe(60)
    })

    test('expire deletes what is due, never a file a batch that has not finished reads', async () => {
      h = await open()
      await seed(h)
      await h.store.files.insert(file('file-due', { expires_at: 150 }))
      await h.store.files.insert(file('file-out', { expires_at: 160, out: true }))
      await h.store.files.insert(file('file-not-yet', { expires_at: 500 }))
      await h.store.files.insert(file('file-forever'))
      await h.store.files.insert(file('file-read', { expires_at: 150 }))
      await h.store.files.insert(file('file-done', { expires_at: 150 }))
      await h.exec(batchOn('batch_running', 'file-read', 'in_progress'))
      await h.exec(batchOn('batch_finished', 'file-done', 'completed'))

      const gone = await h.store.files.expire(200, 100, SYSTEM_AUDIT)
      expect(ids(gone)).toEqual(['file-done', 'file-due', 'file-out'])
      expect(gone.find((r) => r.id === 'file-out')).toMatchObject({ purpose: 'batch_output', bytes: 10 })
      expect(await h.store.files.expire(200, 100, SYSTEM_AUDIT)).toEqual([])
      // The batch still names its input after the file is gone.
      expect((await h.store.batches.get('batch_finished', null))?.input_file_id).toBe('file-done')

      // Postponed until its batch finishes, then taken by the next pass.
      await h.exec(`UPDATE batches SET status = 'completed' WHERE id = 'batch_running'`)
      expect(ids(await h.store.files.expire(200, 100, SYSTEM_AUDIT))).toEqual(['file-read'])
      expect(ids(await h.store.files.expire(10_000, 100, SYSTEM_AUDIT))).toEqual(['file-not-yet'])
      expect(ids((await h.store.files.page({ ownerId: 'user_a', now: 0 }, { limit: 20 })).rows)).toEqual([
        'file-forever',
      ])
    })

    test('expire takes at most `limit` records, soonest expiry first, past postponed ones', async () => {
      h = await open()
      await seed(h)
      // The earliest expiries are in use: they must not fill every chunk and starve the rest.
      for (let i = 0; i < 3; i++) {
        await h.store.files.insert(file(`file-busy-${i}`, { expires_at: 100 + i }))
        await h.exec(batchOn(`batch_${i}`, `file-busy-${i}`, 'validated'))
      }
      for (let i = 0; i < 5; i++) await h.store.files.insert(file(`file-${i}`, { expires_at: 110 + i }))
      expect(ids(await h.store.files.expire(200, 2, SYSTEM_AUDIT))).toEqual(['file-0', 'file-1'])
      expect(ids(await h.store.files.expire(200, 2, SYSTEM_AUDIT))).toEqual(['file-2', 'file-3'])
      expect(ids(await h.store.files.expire(200, 2, SYSTEM_AUDIT))).toEqual(['file-4'])
    })
  })
}
