import { afterAll, beforeAll, describe, expect, spyOn, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { networkInterfaces, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { startTestServer, type TestServer } from '../helpers/app'
import { type MadeUser, makePersonalKey, makeUser, makeWorkerKey } from '../helpers/builders'
import { ownProcess } from '../helpers/children'
import { chatLines } from '../helpers/daemon'
import { startFakeRuntime } from '../helpers/fake-runtime'
import { until } from '../helpers/until'
import { spawnWorker } from '../helpers/worker-process'

// The warning the terminal client and the worker daemon give, once, when a key would go to another
// machine over http:// (docs/deployment.md "TLS on the binary"). "Another machine" is this one's
// own network address: a server bound to every interface, reached the way a LAN host would be.

const REPO = resolve(import.meta.dir, '../..')
const dir = mkdtempSync(join(tmpdir(), 'gk-cleartext-'))
let server: TestServer
let lan: string
let loopback: string
let apiKey: string
let user: MadeUser

/** This machine's first non-loopback IPv4 address. */
function lanAddress(): string {
  for (const nics of Object.values(networkInterfaces()))
    for (const nic of nics ?? []) if (nic.family === 'IPv4' && !nic.internal) return nic.address
  throw new Error('this test needs a network interface with an IPv4 address besides loopback')
}

beforeAll(async () => {
  server = await startTestServer({ HOST: '0.0.0.0' })
  lan = `http://${lanAddress()}:${server.port}`
  loopback = `http://127.0.0.1:${server.port}`
  user = await makeUser(server)
  apiKey = (await makePersonalKey(server, user)).key
})

afterAll(async () => {
  await server.stop()
  rmSync(dir, { recursive: true, force: true })
})

async function client(args: string[], serverUrl: string) {
  const proc = ownProcess(
    Bun.spawn([process.execPath, join(REPO, 'src/cli.ts'), ...args], {
      cwd: dir,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: dir,
        XDG_CONFIG_HOME: join(dir, 'config'),
        GRIDKEEP_SERVER: serverUrl,
        GRIDKEEP_API_KEY: apiKey,
      },
      stdin: 'ignore',
      stdout: 'pipe',
      stderr: 'pipe',
    }),
  )
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ])
  return { code, stdout, stderr }
}

const warnings = (text: string) => text.split('\n').filter((l) => l.includes('in clear text'))

describe('a key in clear text', () => {
  test('the terminal client says so once per command, however many calls it makes; not to this machine', async () => {
    // submit: the upload, the batch, its validation followed: several calls, each with the key.
    const input = join(dir, 'requests.jsonl')
    writeFileSync(input, `${chatLines(2, 'no-such-model').join('\n')}\n`)
    const overLan = await client(['submit', input], lan)
    expect(overLan.stdout).toContain('"event":"created"')
    expect(warnings(overLan.stderr)).toEqual([
      `warning: sending your key or password to ${lan} in clear text (http:// to a host that is not this machine): anyone on the network can read it; use https:// (docs/deployment.md "TLS on the binary")`,
    ])
    const local = await client(['submit', input], loopback)
    expect(local.stdout).toContain('"event":"created"')
    expect(warnings(local.stderr)).toEqual([])
  })

  test('the worker daemon says so once, at its start, however many calls it makes; not to this machine', async () => {
    const key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    const rt = startFakeRuntime({ models: ['m'] })
    // The polls each worker makes, as the server sees them (its store is asked for the worker).
    const polls = new Map<string, number>()
    const fleet = server.deps.store.fleet
    const original = fleet.findWorkerWithHosting.bind(fleet)
    const seen = spyOn(fleet, 'findWorkerWithHosting')
    seen.mockImplementation((id, ...rest) => {
      polls.set(id, (polls.get(id) ?? 0) + 1)
      return original(id, ...rest)
    })
    const start = (serverUrl: string, name: string) =>
      spawnWorker(
        [
          '--server',
          serverUrl,
          '--name',
          name,
          '--runtime',
          'openai',
          '--runtime-url',
          rt.url,
          '--state-dir',
          join(dir, name),
          '--poll-interval',
          '0.05',
          '--poll-wait',
          '0',
        ],
        { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, GRIDKEEP_WORKER_KEY: key },
        { outputDir: dir },
      )
    const overLan = start(lan, 'cleartext-lan')
    const local = start(loopback, 'cleartext-local')
    try {
      // Each daemon registers, heartbeats and polls again and again, every call carrying the key.
      for (const name of ['cleartext-lan', 'cleartext-local'])
        await until(`${name} registered, heartbeating and polling`, async () => {
          const { rows } = await server.deps.store.fleet.listWorkers(user.personalOrgId, { limit: 100 })
          const worker = rows.find((w) => w.name === name)
          return worker && worker.last_heartbeat_at !== null && (polls.get(worker.id) ?? 0) >= 5
        })
      for (const d of [overLan, local]) {
        d.proc.kill('SIGTERM')
        expect(await d.exited()).toBe(0)
      }
      const lines = warnings(overLan.output()).map((l) => JSON.parse(l))
      expect(lines).toHaveLength(1)
      expect(lines[0]).toMatchObject({ level: 'warn' })
      expect(lines[0].msg).toStartWith(`sending the worker key to ${lan} in clear text`)
      expect(warnings(local.output())).toEqual([])
    } finally {
      seen.mockRestore()
      overLan.proc.kill('SIGKILL')
      local.proc.kill('SIGKILL')
      await rt.stop()
    }
  })
})
