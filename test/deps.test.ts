import { afterAll, expect, test } from 'bun:test'
import { join } from 'node:path'
import { Glob } from 'bun'
import { makeTestApp } from './helpers/app'
import { makeUser } from './helpers/builders'

// Per-server state is made by src/compose.ts (createServer) beside the infrastructure of src/deps.ts,
// never in module-level maps keyed by the server: each server, and each test's app in one process,
// has its own (ARCHITECTURE.md rule 2).

const a = makeTestApp({ POOL_CACHE_SECONDS: '60' })
const b = makeTestApp({ POOL_CACHE_SECONDS: '60' })
afterAll(() => {
  a.close()
  b.close()
})

test('no module of src/ keeps a map keyed by Deps or Server', async () => {
  const offenders: string[] = []
  const src = join(import.meta.dir, '../src')
  for await (const file of new Glob('**/*.ts').scan(src)) {
    const text = await Bun.file(join(src, file)).text()
    if (/(Weak)?Map<\s*(Deps|Server)\b/.test(text)) offenders.push(file)
  }
  expect(offenders).toEqual([])
})

test("two servers in one process keep their own state: one's cached pool answer is not the other's", async () => {
  expect(a.deps.instanceId).not.toBe(b.deps.instanceId)
  const ua = await makeUser(a)
  const first = await a.req('GET', '/v1/pool/capacity', { token: ua.token })
  expect(first.status).toBe(200)
  expect(a.deps.poolCache.size).toBe(1)
  expect(b.deps.poolCache.size).toBe(0)
  expect((await b.req('GET', '/v1/pool/capacity')).status).toBe(200)
  expect([...b.deps.poolCache.keys()]).toEqual(['anonymous'])
  expect([...a.deps.poolCache.keys()]).toEqual([ua.id])
})
