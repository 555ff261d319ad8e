import { afterEach, expect, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import type { KeyOwner, NewKey } from '../../src/store/keys'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// API keys and the credential lookup behave the same on SQLite and on PostgreSQL (docs/api.md §12).

let n = 0
const fresh = (over: Partial<NewKey> = {}): NewKey => {
  const i = ++n
  return {
    name: `k${i}`,
    prefix: `gk-pre${i}`,
    key_hash: `hash-${i}-${crypto.randomUUID()}`,
    created_by: 'someone',
    created_at: 10,
    expires_at: null,
    ...over,
  }
}
const replacement = () => {
  const { name, expires_at, ...r } = fresh()
  return r
}

async function owners(h: StoreHarness) {
  const u = await h.store.accounts.createUser(
    {
      email: `k${++n}@x.test`,
      password_hash: 'h',
      full_name: 'K',
      platform_role: 'user',
      must_change_password: false,
      now: 1,
    },
    'K org',
    SYSTEM_AUDIT,
  )
  const [m] = await h.store.orgs.listMembershipsOf(u.id)
  return {
    personal: { type: 'personal', userId: u.id } as KeyOwner,
    worker: { type: 'worker', orgId: m!.org_id } as KeyOwner,
    userId: u.id,
    orgId: m!.org_id,
  }
}

const settled = async <T>(ps: Promise<T>[]) => {
  const all = await Promise.allSettled(ps)
  return {
    ok: all.filter((r) => r.status === 'fulfilled').map((r) => (r as PromiseFulfilledResult<T>).value),
    errors: all.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason),
  }
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} keys`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('createKey and the credential lookup by hash; recordKeyUse', async () => {
      h = await open()
      const o = await owners(h)
      const pk = await h.store.keys.createKey(
        o.personal,
        fresh({ name: 'laptop', expires_at: 500 }),
        SYSTEM_AUDIT,
      )
      expect(pk).toMatchObject({
        key_type: 'personal',
        name: 'laptop',
        user_id: o.userId,
        org_id: null,
        created_at: 10,
        expires_at: 500,
        last_used_at: null,
        revoked_at: null,
      })
      expect(pk.id).toStartWith('key_')
      const wk = await h.store.keys.createKey(o.worker, fresh(), SYSTEM_AUDIT)
      expect(wk).toMatchObject({ key_type: 'worker', org_id: o.orgId, user_id: null })
      expect(await h.store.keys.findCredentialByKeyHash(pk.key_hash)).toEqual({
        id: pk.id,
        key_type: 'personal',
        org_id: null,
        user_id: o.userId,
        expires_at: 500,
        last_used_at: null,
        revoked_at: null,
      })
      expect(await h.store.keys.findCredentialByKeyHash('nope')).toBeUndefined()
      await h.store.keys.recordKeyUse(wk.id, 77)
      expect(await h.store.keys.findCredentialByKeyHash(wk.key_hash)).toMatchObject({
        key_type: 'worker',
        org_id: o.orgId,
        last_used_at: 77,
      })
    })

    test("listKeys and findKey see only the owner's keys", async () => {
      h = await open()
      const a = await owners(h)
      const b = await owners(h)
      const ids = []
      for (let i = 0; i < 3; i++)
        ids.push((await h.store.keys.createKey(a.personal, fresh(), SYSTEM_AUDIT)).id)
      const other = await h.store.keys.createKey(b.personal, fresh(), SYSTEM_AUDIT)
      const workerKey = await h.store.keys.createKey(a.worker, fresh(), SYSTEM_AUDIT)
      const page = await h.store.keys.listKeys(a.personal, { limit: '2' })
      expect(page.rows.map((k) => k.id)).toEqual([ids[2], ids[1]])
      expect(page.has_more).toBe(true)
      expect((await h.store.keys.listKeys(a.personal, { after: ids[1] })).rows.map((k) => k.id)).toEqual([
        ids[0],
      ])
      expect((await h.store.keys.listKeys(a.worker, {})).rows.map((k) => k.id)).toEqual([workerKey.id])
      // Another owner's key is no cursor and no key.
      await expect(h.store.keys.listKeys(a.personal, { after: other.id })).rejects.toMatchObject({
        errorCode: 'invalid_cursor',
      })
      expect((await h.store.keys.findKey(a.personal, ids[0]!))?.id).toBe(ids[0])
      expect(await h.store.keys.findKey(a.personal, other.id)).toBeUndefined()
      expect(await h.store.keys.findKey(a.worker, ids[0]!)).toBeUndefined()
    })

    test('updateKey: rename, expiry, revoke once (the first time stays); not the owner → undefined', async () => {
      h = await open()
      const a = await owners(h)
      const b = await owners(h)
      const k = await h.store.keys.createKey(a.personal, fresh(), SYSTEM_AUDIT)
      expect(await h.store.keys.updateKey(b.personal, k.id, { name: 'x' }, 1, SYSTEM_AUDIT)).toBeUndefined()
      expect(
        await h.store.keys.updateKey(a.personal, k.id, { name: 'renamed', expires_at: 900 }, 1, SYSTEM_AUDIT),
      ).toMatchObject({
        name: 'renamed',
        expires_at: 900,
        revoked_at: null,
      })
      expect(await h.store.keys.updateKey(a.personal, k.id, {}, 1, SYSTEM_AUDIT)).toMatchObject({
        name: 'renamed',
      })
      expect(
        (await h.store.keys.updateKey(a.personal, k.id, { revoked_at: 20 }, 1, SYSTEM_AUDIT))?.revoked_at,
      ).toBe(20)
      expect(
        await h.store.keys.updateKey(a.personal, k.id, { revoked_at: 30, expires_at: null }, 1, SYSTEM_AUDIT),
      ).toMatchObject({
        revoked_at: 20,
        expires_at: null,
      })
    })

    test('rotateKey: same name and expiry, the old one revoked; 404 and the rotation rule', async () => {
      h = await open()
      const a = await owners(h)
      const b = await owners(h)
      const k = await h.store.keys.createKey(
        a.worker,
        fresh({ name: 'rack', expires_at: 1000 }),
        SYSTEM_AUDIT,
      )
      await expect(
        h.store.keys.rotateKey(b.worker, k.id, replacement(), 50, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 404,
        errorCode: 'api_key_not_found',
      })
      const r = replacement()
      const next = await h.store.keys.rotateKey(a.worker, k.id, r, 50, SYSTEM_AUDIT)
      expect(next).toMatchObject({
        ...r,
        key_type: 'worker',
        org_id: a.orgId,
        name: 'rack',
        expires_at: 1000,
      })
      expect((await h.store.keys.findKey(a.worker, k.id))?.revoked_at).toBe(50)
      await expect(
        h.store.keys.rotateKey(a.worker, k.id, replacement(), 60, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 400,
        errorCode: 'api_key_revoked',
      })
      await expect(
        h.store.keys.rotateKey(a.worker, next.id, replacement(), 1000, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 400,
        errorCode: 'api_key_expired',
      })
      expect((await h.store.keys.findKey(a.worker, next.id))?.revoked_at).toBeNull()
    })

    test('rotateAllKeys: every active key revoked, one `default` issued', async () => {
      h = await open()
      const a = await owners(h)
      const old = [
        await h.store.keys.createKey(a.personal, fresh(), SYSTEM_AUDIT),
        await h.store.keys.createKey(a.personal, fresh(), SYSTEM_AUDIT),
      ]
      await h.store.keys.updateKey(a.personal, old[0]!.id, { revoked_at: 5 }, 1, SYSTEM_AUDIT)
      const other = await h.store.keys.createKey(a.worker, fresh(), SYSTEM_AUDIT)
      const next = await h.store.keys.rotateAllKeys(a.personal, replacement(), 40, SYSTEM_AUDIT)
      expect(next).toMatchObject({
        name: 'default',
        expires_at: null,
        revoked_at: null,
        key_type: 'personal',
      })
      expect((await h.store.keys.findKey(a.personal, old[0]!.id))?.revoked_at).toBe(5)
      expect((await h.store.keys.findKey(a.personal, old[1]!.id))?.revoked_at).toBe(40)
      expect((await h.store.keys.findKey(a.worker, other.id))?.revoked_at).toBeNull()
    })

    test('racing rotations leave exactly one live key', async () => {
      h = await open()
      const a = await owners(h)
      const k = await h.store.keys.createKey(a.worker, fresh(), SYSTEM_AUDIT)
      const one = await settled(
        Array.from({ length: 4 }, () =>
          h.store.keys.rotateKey(a.worker, k.id, replacement(), 50, SYSTEM_AUDIT),
        ),
      )
      expect(one.ok.length).toBe(1)
      expect(one.errors.map((e) => e.errorCode)).toEqual(Array(3).fill('api_key_revoked'))
      await settled([
        ...Array.from({ length: 4 }, () =>
          h.store.keys.rotateAllKeys(a.worker, replacement(), 60, SYSTEM_AUDIT),
        ),
        h.store.keys.rotateKey(a.worker, one.ok[0]!.id, replacement(), 60, SYSTEM_AUDIT),
      ])
      const live = (await h.store.keys.listKeys(a.worker, { limit: '100' })).rows.filter(
        (r) => r.revoked_at === null,
      )
      expect(live.length).toBe(1)
    })
  })
}
