import { afterEach, expect, test } from 'bun:test'
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Server } from '../../src/compose'
import { ConfigError } from '../../src/config'
import { migrate } from '../../src/db/migrate'
import { openDb } from '../../src/db/open'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { manualClock } from '../../src/lib/clock'
import { ensureSuperadmin } from '../../src/modules/auth/service'
import { sqliteStore } from '../../src/store/sqlite'
import { makeTestApp } from '../helpers/app'
import { baseEnv, spawnServer, tempDir } from '../helpers/ops'
import { describeEngine, type StoreHarness, storeConfig, storeEngines } from '../helpers/stores'

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

    test('an ordinary user holding ADMIN_EMAIL stops the start with one line saying what to do', async () => {
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
      const refused = await ensureSuperadmin(deps, () => {}).catch((e) => e)
      expect(refused).toBeInstanceOf(ConfigError)
      expect(refused.message).toBe(
        'invalid configuration: ADMIN_EMAIL: there is no superadmin, and root@lab.test is an account that is not one, so no first superadmin can be made; set ADMIN_EMAIL to an unused address to make one, then sign in with it and give the role back on the Admin page',
      )
    })
  })
}

test('`gridkeep serve` on such a database exits with that one line, never a stack trace', async () => {
  const dataDir = tempDir('first-start')
  try {
    const { db, sqlite } = openDb({ path: join(dataDir, 'gridkeep.db') })
    migrate(db)
    const store = sqliteStore({ db, sqlite, config: storeConfig(), clock: manualClock() })
    await store.accounts.createUser(
      {
        email: 'admin@localhost',
        password_hash: '',
        full_name: 'Demoted Admin',
        platform_role: 'user',
        must_change_password: false,
        now: 1,
      },
      'x',
      SYSTEM_AUDIT,
    )
    await store.close()
    const server = await spawnServer(baseEnv(dataDir))
    expect(await server.exited).toBe(2)
    const lines = server
      .output()
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('{'))
    expect(lines).toEqual([
      expect.stringMatching(
        /^gridkeep: invalid configuration: ADMIN_EMAIL: there is no superadmin, and admin@localhost is an account that is not one/,
      ),
    ])
    expect(server.output()).not.toContain('    at ')
  } finally {
    rmSync(dataDir, { recursive: true, force: true })
  }
})
