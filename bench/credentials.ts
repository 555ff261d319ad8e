// The credential lookup of every authenticated request (docs/api.md §1), in process on SQLite:
// authenticate() for a worker key, a personal key and a JWT, against a bare baseline that hashes
// the key and reads the same columns with one prepared bun:sqlite statement behind an await.
//
//   bun run bench/credentials.ts            (5 paired rounds of 1 s per side)
//   bun run bench/credentials.ts --quick    (3 paired rounds of 0.4 s per side)

import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer } from '../src/compose'
import { loadConfig } from '../src/config'
import { SYSTEM_AUDIT } from '../src/domain/audit'
import { authenticate } from '../src/http/credentials'
import { generateRawKey, keyDisplayPrefix, sha256Hex } from '../src/lib/keys'
import { setLogSink } from '../src/lib/logger'
import { createPasswords } from '../src/lib/passwords'
import { createUser } from '../src/modules/users/service'
import { fmt, quick } from './lib/load'

setLogSink(() => {})
const ROUNDS = quick ? 3 : 5
const ROUND_MS = quick ? 400 : 1000

const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-credentials-'))
const config = loadConfig({ DATA_DIR: dir, JWT_SECRET: 'bench-secret-bench-secret-bench-secret-0123' })
const deps = createServer(config, { passwords: createPasswords({ memoryCost: 256, timeCost: 1 }) })
const user = await createUser(
  deps,
  {
    email: 'bench@example.test',
    password: 'bench-password',
    full_name: 'B',
  },
  SYSTEM_AUDIT,
)
const [personal] = await deps.store.orgs.listMembershipsOf(user.id)

async function newKey(owner: Parameters<typeof deps.store.keys.createKey>[0]) {
  const raw = generateRawKey()
  await deps.store.keys.createKey(
    owner,
    {
      name: 'bench',
      prefix: keyDisplayPrefix(raw),
      key_hash: sha256Hex(raw),
      created_by: user.id,
      created_at: deps.clock.now(),
      expires_at: null,
    },
    SYSTEM_AUDIT,
  )
  return raw
}
const workerKey = await newKey({ type: 'worker', orgId: personal!.org_id })
const personalKey = await newKey({ type: 'personal', userId: user.id })
const jwt = (await deps.tokens.sign(user.id, user.token_version)).token

const bare = deps.sqlite.prepare<{ id: string }, [string]>(
  `SELECT id, key_type, org_id, user_id, expires_at, last_used_at, revoked_at FROM api_keys WHERE key_hash = ?`,
)
const bareLookup = async (header: string) => bare.get(sha256Hex(header.slice(7)))

/** Calls per second of `fn` for `ms`, in a closed loop. */
async function rate(fn: () => Promise<unknown>, ms: number) {
  let n = 0
  const end = performance.now() + ms
  while (performance.now() < end) {
    for (let i = 0; i < 200; i++) await fn()
    n += 200
  }
  return n / (ms / 1000)
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const cases: [string, string][] = [
  ['worker key', `Bearer ${workerKey}`],
  ['personal key', `Bearer ${personalKey}`],
  ['JWT', `Bearer ${jwt}`],
]
const baseRates: number[] = []
const results = new Map<string, { rates: number[]; ratios: number[] }>(
  cases.map(([name]) => [name, { rates: [], ratios: [] }]),
)
// Warm up both sides (prepared statements, JIT).
await rate(() => bareLookup(`Bearer ${workerKey}`), 100)
for (const [, header] of cases) await rate(async () => authenticate(deps, header), 100)
for (let r = 0; r < ROUNDS; r++) {
  const base = await rate(() => bareLookup(`Bearer ${workerKey}`), ROUND_MS)
  baseRates.push(base)
  for (const [name, header] of cases) {
    const got = await rate(async () => authenticate(deps, header), ROUND_MS)
    results.get(name)!.rates.push(got)
    results.get(name)!.ratios.push(got / base)
  }
}
console.log(`credential lookup on SQLite, ${ROUNDS} paired rounds of ${ROUND_MS} ms`)
console.log(`bare: hash + 1 prepared SELECT   : ${fmt(median(baseRates))} /s (median)`)
for (const [name, { rates, ratios }] of results) {
  console.log(
    `authenticate(${name})`.padEnd(33) +
      `: ${fmt(median(rates))} /s, ${fmt(median(ratios) * 100, 1)} % of bare (median of paired rounds)`,
  )
}
deps.sqlite.close()
rmSync(dir, { recursive: true, force: true })
