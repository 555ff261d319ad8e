import { afterEach, expect, test } from 'bun:test'
import type { Server } from '../../src/compose'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { ensureSuperadmin } from '../../src/modules/auth/service'
import { makeTestApp } from '../helpers/app'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// docs/api.md §2 first start, on either engine: instances starting together on one database create one
// superadmin between them (docs/api.md §12); an ordinary account holding ADMIN_EMAIL stops the start.

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `first start on ${kind}`, () => {
    let h: StoreHarness
    let app: ReturnType<typeof makeTestApp>
    afterEach(async () => {
      app?.close()
      await h?.close()
    })

    const depsOn = (store: StoreHarness['store']): Server => {
      app = makeTestApp({ ADMIN_EMAIL: 'root@lab.test', ADMIN_PASSWORD: 'initial-password' })
      return { ...app.deps, store }
    }

    test('instances starting at once create one superadmin; the others find it', async () => {
      h = await open()
      const deps = depsOn(h.store)
      const made = await Promise.all(Array.from({ length: 4 }, () => ensureSuperadmin(deps, () => {})))
      expect(made.filter((u) => u !== null).length).toBe(1)
      expect(made.find((u) => u)?.email).toBe('root@lab.test')
      const n = await h.one<{ n: number }>(
        "SELECT count(*) AS n FROM users WHERE platform_role = 'superadmin'",
      )
      expect(Number(n.n)).toBe(1)
    })

    test('an ordinary user holding ADMIN_EMAIL stops the start with 409 email_taken', async () => {
      h = await open()
      const deps = depsOn(h.store)
      await h.store.accounts.createUser(
        {
          email: 'root@lab.test',
          password_hash: 'h',
          full_name: 'Not Root',
          platform_role: 'user',
          must_change_password: false,
          now: 1,
        },
        'x',
        SYSTEM_AUDIT,
      )
      await expect(ensureSuperadmin(deps, () => {})).rejects.toMatchObject({ errorCode: 'email_taken' })
    })
  })
}
