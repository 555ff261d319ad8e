import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { hostname, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { startTestServer, type TestServer } from '../helpers/app'
import {
  gridkeepBinary,
  removeBuiltBinary,
  runGridkeep,
  runOnTerminal,
  spawnGridkeep,
} from '../helpers/binary'
import { type MadeUser, makePersonalKey, makeUser, makeWorkerKey } from '../helpers/builders'
import { chatLines, daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { startFakeRuntime } from '../helpers/fake-runtime'
import { rememberSecret } from '../helpers/secrets'
import { until } from '../helpers/until'

// The terminal client as a user runs it: the COMPILED binary (test/helpers/binary.ts) against a
// real server over HTTP, with a real daemon running the batches against the stand-in runtime of
// test/helpers/fake-runtime.ts. Exit codes, the files written and the JSON lines a script reads
// are docs/guide.md "The terminal client".

const SLUG = 'cli-chat-model-q4km'
const RUNTIME_MODEL = 'cli/runtime-model-q4'

let server: TestServer
let user: MadeUser
let workerKey: string
let apiKey: string
const dir = mkdtempSync(join(tmpdir(), 'gk-client-'))
let configs = 0

beforeAll(async () => {
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    [
      'models:',
      `  - id: ${SLUG}`,
      '    display_name: CLI chat model',
      '    task_type: chat',
      '    quantization: Q4_K_M',
      '    vram_gb: 4',
      '    size_gb: 1',
      '    serving_profiles:',
      '      - runtime: openai',
      `        runtime_model_id: ${RUNTIME_MODEL}`,
    ].join('\n'),
  )
  // Batches of more than 20 requests are split into shards of at most 20 (docs/api.md §16).
  server = await startTestServer({
    CATALOGUE_PATH: manifest,
    LOG_LEVEL: 'info',
    SHARD_MIN_REQUESTS: '10',
    SHARD_MAX_REQUESTS: '20',
    RATE_LIMIT_KEYS_PER_MINUTE: '0',
  })
  user = await makeUser(server)
  workerKey = (await makeWorkerKey(server, user, user.personalOrgId)).key
  apiKey = (await makePersonalKey(server, user)).key
  await gridkeepBinary()
}, 120_000)

afterAll(async () => {
  await server.stop()
  rmSync(dir, { recursive: true, force: true })
  removeBuiltBinary()
})

/** A fresh home and config directory: nothing saved unless a test saves it. */
function home(extra: Record<string, string> = {}) {
  const root = join(dir, `home-${++configs}`)
  return { HOME: root, XDG_CONFIG_HOME: join(root, 'config'), ...extra }
}
/** The environment of a user whose key is in the environment (docs/guide.md: it wins over the file). */
const keyed = (extra: Record<string, string> = {}) =>
  home({ GRIDKEEP_SERVER: server.url, GRIDKEEP_API_KEY: apiKey, ...extra })
const configFile = (env: { XDG_CONFIG_HOME: string }) => join(env.XDG_CONFIG_HOME, 'gridkeep', 'config.json')

const getBatch = async (id: string) =>
  (await server.req('GET', `/v1/batches/${id}`, { token: user.token })).body

function inputFile(name: string, lines: string[]): string {
  const path = join(dir, name)
  writeFileSync(path, `${lines.join('\n')}\n`)
  return path
}

const jsonl = (path: string) =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))

function daemon(o: Parameters<typeof startFakeRuntime>[0] = {}) {
  const rt = startFakeRuntime({ models: [RUNTIME_MODEL], ...o })
  const agent = runAgent(daemonOptions(server.url, workerKey, rt.url), fastDeps())
  return {
    async stop() {
      agent.agent.shutdown(true)
      await agent.done
      await rt.stop()
    },
  }
}

function freePort(): number {
  const listener = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const port = listener.port
  listener.stop(true)
  return port
}

let completedBatch: any

describe('gridkeep login and logout', () => {
  test('a first login that must change its password, through stdin: new password, a key of its own saved 0600 in a 0700 directory; logout revokes it', async () => {
    const env = home()
    const newPassword = 'a-better-admin-password-1'
    rememberSecret(newPassword)
    const r = await runGridkeep(['login', '--server', server.url], {
      env,
      stdin: `admin@localhost\n${server.config.ADMIN_PASSWORD}\n${newPassword}\n`,
    })
    expect([r.code, r.stderr]).toEqual([0, expect.stringContaining('must change its password')])
    const path = configFile(env)
    const login = r.lines.find((l) => l.event === 'login')
    expect(login).toMatchObject({
      server: server.url,
      email: 'admin@localhost',
      key_name: `gridkeep-cli@${hostname()}`,
      config: path,
    })
    expect(statSync(path).mode & 0o777).toBe(0o600)
    expect(statSync(dirname(path)).mode & 0o777).toBe(0o700)
    const saved = JSON.parse(readFileSync(path, 'utf8'))
    rememberSecret(saved.api_key)
    expect(saved).toEqual({
      server: server.url,
      api_key: expect.stringMatching(/^gk-[0-9A-Za-z]{40}$/),
      key_id: login.key_id,
      key_name: `gridkeep-cli@${hostname()}`,
      email: 'admin@localhost',
    })
    expect(login.key_prefix).toBe(saved.api_key.slice(0, 12))
    // The password was changed (docs/api.md §2): the new one logs in without the flag, the old one not.
    const relog = await server.req('POST', '/v1/auth/login', {
      body: { email: 'admin@localhost', password: newPassword },
    })
    expect([relog.status, relog.body.must_change_password]).toEqual([200, false])
    const old = { email: 'admin@localhost', password: server.config.ADMIN_PASSWORD }
    expect((await server.req('POST', '/v1/auth/login', { body: old })).status).toBe(401)

    // The saved file is all the next commands need.
    const models = await runGridkeep(['models'], { env })
    expect(models.code).toBe(0)
    expect(models.lines.map((m) => m.id)).toContain(SLUG)

    const out = await runGridkeep(['logout'], { env })
    expect(out.code).toBe(0)
    expect(out.lines).toEqual([
      {
        event: 'logout',
        server: server.url,
        key_id: login.key_id,
        key_prefix: login.key_prefix,
        revoked: true,
      },
    ])
    expect(existsSync(path)).toBe(false)
    const refused = await server.req('GET', '/v1/models', { token: saved.api_key })
    expect([refused.status, refused.body.error.code]).toEqual([401, 'api_key_revoked'])
    const after = await runGridkeep(['batches'], { env: { ...env, GRIDKEEP_SERVER: server.url } })
    expect([after.code, after.stderr]).toEqual([
      4,
      expect.stringContaining("not logged in: run 'gridkeep login'"),
    ])
  })

  test('on a terminal the password is typed without echo; logging in again revokes the key this machine had', async () => {
    const env = home()
    const answers = [
      { after: 'Email: ', type: `${user.email}\r` },
      { after: 'Password: ', type: `${user.password}\r` },
    ]
    const first = await runOnTerminal(['login', '--server', server.url], { env, answers })
    expect(first.code).toBe(0)
    expect(first.screen).toContain(`Email: ${user.email}`)
    expect(first.screen).not.toContain(user.password)
    expect(first.screen).toContain(`logged in to ${server.url} as ${user.email}`)
    const firstKey = JSON.parse(readFileSync(configFile(env), 'utf8'))
    rememberSecret(firstKey.api_key)

    const second = await runOnTerminal(['login', '--server', server.url], { env, answers })
    expect(second.code).toBe(0)
    expect(second.screen).not.toContain(user.password)
    const secondKey = JSON.parse(readFileSync(configFile(env), 'utf8'))
    rememberSecret(secondKey.api_key)
    expect(secondKey.key_id).not.toBe(firstKey.key_id)
    const keys = `/v1/users/me/api-keys`
    expect(
      (await server.req('GET', `${keys}/${firstKey.key_id}`, { token: user.token })).body.revoked_at,
    ).not.toBeNull()
    expect(
      (await server.req('GET', `${keys}/${secondKey.key_id}`, { token: user.token })).body.revoked_at,
    ).toBeNull()

    // Logout while the server is down keeps the key, so that it can run again…
    const saved = readFileSync(configFile(env), 'utf8')
    writeFileSync(configFile(env), JSON.stringify({ ...secondKey, server: `http://127.0.0.1:${freePort()}` }))
    const down = await runGridkeep(['logout'], { env })
    expect([down.code, down.stderr]).toEqual([5, expect.stringContaining('is still saved and valid')])
    expect(existsSync(configFile(env))).toBe(true)
    // …and a key the server already refuses (revoked on the Keys page) is just forgotten.
    writeFileSync(configFile(env), saved)
    await server.req('DELETE', `${keys}/${secondKey.key_id}`, { token: user.token })
    const out = await runGridkeep(['logout'], { env })
    expect([out.code, out.lines[0]]).toEqual([
      0,
      expect.objectContaining({ event: 'logout', revoked: false }),
    ])
    expect(existsSync(configFile(env))).toBe(false)
  })

  test('a wrong password is exit 4 and saves nothing; --password-stdin reads the password alone; --key saves a key as given', async () => {
    const env = home()
    const wrong = await runGridkeep(
      ['login', '--server', server.url, '--email', user.email, '--password-stdin'],
      {
        env,
        stdin: 'not-the-password\n',
      },
    )
    expect([wrong.code, wrong.stderr]).toEqual([4, expect.stringContaining('wrong email or password')])
    expect(wrong.lines.at(-1)).toMatchObject({ event: 'error', exit_code: 4, status: 401 })
    expect(existsSync(configFile(env))).toBe(false)

    const right = await runGridkeep(
      ['login', '--server', server.url, '--email', user.email, '--password-stdin'],
      {
        env,
        stdin: `${user.password}\n`,
      },
    )
    expect(right.code).toBe(0)
    expect(right.stderr).not.toContain('Password')
    rememberSecret(JSON.parse(readFileSync(configFile(env), 'utf8')).api_key)

    const given = home()
    const worker = await runGridkeep(['login', '--server', server.url, '--key', workerKey], { env: given })
    expect(worker.code).toBe(4)
    expect(existsSync(configFile(given))).toBe(false)
    const saved = await runGridkeep(['login', '--server', server.url, '--key', apiKey], { env: given })
    expect(saved.code).toBe(0)
    expect(JSON.parse(readFileSync(configFile(given), 'utf8'))).toMatchObject({
      api_key: apiKey,
      key_id: null,
    })
    // Its logout only forgets it: the key was not made by login, and stays valid.
    const out = await runGridkeep(['logout'], { env: given })
    expect([out.code, out.lines[0]?.revoked]).toEqual([0, false])
    expect(out.stderr).toContain('stays valid')
    expect((await server.req('GET', '/v1/models', { token: apiKey })).status).toBe(200)
  })

  test('the environment wins over the config file: GRIDKEEP_SERVER and GRIDKEEP_API_KEY', async () => {
    const env = home()
    const stale = await makePersonalKey(server, user)
    await runGridkeep(['login', '--server', server.url, '--key', stale.key], { env })
    // The file names a server that is down and a key that is then revoked…
    const config = JSON.parse(readFileSync(configFile(env), 'utf8'))
    writeFileSync(configFile(env), JSON.stringify({ ...config, server: `http://127.0.0.1:${freePort()}` }))
    await server.req('DELETE', `/v1/users/me/api-keys/${stale.id}`, { token: user.token })
    expect((await runGridkeep(['batches'], { env })).code).toBe(5)
    expect((await runGridkeep(['batches'], { env: { ...env, GRIDKEEP_SERVER: server.url } })).code).toBe(4)
    // …and the environment's pair is used instead.
    const r = await runGridkeep(['batches'], {
      env: { ...env, GRIDKEEP_SERVER: server.url, GRIDKEEP_API_KEY: apiKey },
    })
    expect(r.code).toBe(0)
  })
})

describe('gridkeep submit', () => {
  test('--wait: streamed upload, validation, the run on a real daemon in shards, then the output and error files on disk', async () => {
    const worker = daemon()
    // Every tenth request is refused by the runtime (400): it ends in the error file.
    const input = inputFile(
      'requests.jsonl',
      chatLines(50, SLUG, (i) => (i % 10 === 4 ? `#400 ${i}` : `fine ${i}`)),
    )
    const size = statSync(input).size
    const output = join(dir, 'results.jsonl')
    const errors = join(dir, 'errors.jsonl')
    try {
      const r = await runGridkeep(
        [
          'submit',
          input,
          '--wait',
          '-o',
          output,
          '--errors',
          errors,
          '--metadata',
          'project=thesis',
          '--interval',
          '0.1',
        ],
        { env: keyed() },
      )
      expect([r.code, r.stderr]).toEqual([
        0,
        expect.stringContaining('completed: 50 requests, 45 succeeded, 5 failed'),
      ])
      const events = r.lines.map((l) => l.event)
      // One object per change, in the order things happen.
      expect(events[0]).toBe('upload')
      expect(events.slice(events.indexOf('uploaded'), events.indexOf('uploaded') + 2)).toEqual([
        'uploaded',
        'created',
      ])
      expect(events.at(-1)).toBe('done')
      const uploads = r.lines.filter((l) => l.event === 'upload')
      expect(uploads.at(-1)).toEqual({ event: 'upload', file: input, bytes_sent: size, bytes_total: size })
      expect(r.lines.find((l) => l.event === 'uploaded')).toMatchObject({
        bytes: size,
        filename: 'requests.jsonl',
      })
      const id = r.lines.find((l) => l.event === 'created').batch_id
      // The daemon may claim the batch before the client first reads it after validation.
      const statuses = r.lines.filter((l) => l.event === 'batch').map((l) => l.status)
      expect(statuses.every((s) => ['validated', 'in_progress', 'completed'].includes(s))).toBe(true)
      expect(statuses.at(-1)).toBe('completed')
      expect(r.stderr).toContain('validated: 50 requests for')
      // The run's lines carry the counts and the shards (docs/api.md §16); counts never go down.
      const runs = r.lines.filter((l) => l.event === 'batch' && l.request_counts)
      const done = runs.map((l) => l.request_counts.completed + l.request_counts.failed)
      expect(done).toEqual([...done].sort((a, b) => a - b))
      const last = runs.at(-1)
      expect(last).toMatchObject({
        status: 'completed',
        request_counts: { total: 50, completed: 45, failed: 5 },
        shards: { waiting: 0, running: 0 },
      })
      expect(last.shards.total).toBeGreaterThan(1)
      expect(last.shards.done).toBe(last.shards.total)
      expect(r.lines.at(-1)).toEqual({
        event: 'done',
        batch_id: id,
        status: 'completed',
        request_counts: { total: 50, completed: 45, failed: 5 },
        output_file_id: expect.stringMatching(/^file-/),
        error_file_id: expect.stringMatching(/^file-/),
        output,
        errors,
        input_order: false,
      })
      const out = jsonl(output)
      const err = jsonl(errors)
      expect([out.length, err.length]).toEqual([45, 5])
      expect(new Set([...out, ...err].map((l) => l.custom_id)).size).toBe(50)
      for (const l of err) expect(l.response.status_code).toBe(400)
      expect(existsSync(`${output}.part`)).toBe(false)
      completedBatch = await getBatch(id)
      expect(completedBatch).toMatchObject({ status: 'completed', metadata: { project: 'thesis' } })
    } finally {
      await worker.stop()
    }
  })

  test('validation errors: each by line and field, the true total, exit 3', async () => {
    const good = chatLines(1, SLUG)[0]!
    const lines = [
      good,
      good,
      'not json',
      JSON.stringify({ custom_id: 'x', body: { model: SLUG }, extra: 1 }),
      ...Array.from({ length: 150 }, (_, i) =>
        JSON.stringify({ custom_id: `m${i}`, body: { model: 'not-a-model' } }),
      ),
    ]
    const input = inputFile('invalid.jsonl', lines)
    const r = await runGridkeep(['submit', input, '--wait'], { env: keyed() })
    expect(r.code).toBe(3)
    const errors = r.lines.filter((l) => l.event === 'validation_error')
    expect(errors).toHaveLength(100)
    expect(errors.slice(0, 3).map(({ line, field, code }) => ({ line, field, code }))).toEqual([
      { line: 2, field: 'custom_id', code: 'duplicate_custom_id' },
      { line: 3, field: null, code: 'invalid_json' },
      { line: 4, field: 'extra', code: 'unknown_fields' },
    ])
    // 150 unsupported models and 150 mismatches with the first line's, beside the first three.
    expect(r.lines.at(-1)).toMatchObject({ event: 'done', status: 'failed', errors_total: 303 })
    expect(r.stderr).toContain(
      'validation failed: 303 errors (the first 100 are stored and listed; 303 in all)',
    )

    // On a terminal: the same errors as a person reads them.
    const tty = await runOnTerminal(['submit', input], { env: keyed() })
    expect(tty.code).toBe(3)
    expect(tty.screen).toContain('line 2  custom_id  duplicate_custom_id')
    expect(tty.screen).toContain('line 3  -  invalid_json')
    expect(tty.screen).toContain('line 5  body.model  unsupported_model')
    expect(tty.screen).toContain('validation failed: 303 errors')
  })

  test('Ctrl-C while it waits: exit 130, the batch keeps running, the resume command finishes it', async () => {
    let release!: () => void
    const held = new Promise<void>((r) => {
      release = r
    })
    const worker = daemon({ hold: () => held })
    const input = inputFile('held.jsonl', chatLines(10, SLUG))
    const output = join(dir, 'held-results.jsonl')
    try {
      const running = await spawnGridkeep(['submit', input, '--wait', '-o', output, '--interval', '0.1'], {
        env: keyed(),
      })
      const { batch_id: id } = await running.line((l) => l.event === 'batch' && l.status === 'in_progress')
      running.proc.kill('SIGINT')
      const r = await running.done()
      expect(r.code).toBe(130)
      const resume = `gridkeep wait ${id} -o ${output}`
      expect(r.lines.at(-1)).toEqual({ event: 'interrupted', batch_id: id, resume })
      expect(r.stderr).toContain(`batch ${id} keeps running on the server. Resume with: ${resume}`)
      expect(existsSync(output)).toBe(false)
      expect((await getBatch(id)).status).toBe('in_progress')

      release()
      const resumed = await runGridkeep(['wait', id, '-o', output, '--interval', '0.1'], { env: keyed() })
      expect(resumed.code).toBe(0)
      expect(jsonl(output)).toHaveLength(10)
    } finally {
      release()
      await worker.stop()
    }
  })

  test('a server that fails for a while during a wait: the client asks again and sees the batch through', async () => {
    let release!: () => void
    const held = new Promise<void>((r) => {
      release = r
    })
    const worker = daemon({ hold: () => held })
    // The client talks to the server through a proxy that answers 503 while `failing`.
    let failing = false
    let refused = 0
    const proxy = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      async fetch(req) {
        const url = new URL(req.url)
        if (failing && req.method === 'GET' && url.pathname.startsWith('/v1/batches/')) {
          refused++
          return Response.json({ error: { message: 'restarting', type: 'server_error' } }, { status: 503 })
        }
        const headers = new Headers(req.headers)
        headers.delete('host')
        return fetch(server.url + url.pathname + url.search, {
          method: req.method,
          headers,
          body: req.body,
          duplex: 'half',
        } as RequestInit)
      },
    })
    const input = inputFile('flaky.jsonl', chatLines(4, SLUG))
    try {
      const running = await spawnGridkeep(['submit', input, '--wait', '--interval', '0.1'], {
        env: keyed({ GRIDKEEP_SERVER: `http://127.0.0.1:${proxy.port}` }),
      })
      await running.line((l) => l.event === 'batch' && l.status === 'in_progress')
      failing = true
      await until('the client asking through the failures', () => refused >= 3)
      failing = false
      release()
      const r = await running.done()
      expect([r.code, r.lines.at(-1)]).toEqual([
        0,
        expect.objectContaining({ event: 'done', status: 'completed' }),
      ])
    } finally {
      release()
      proxy.stop(true)
      await worker.stop()
    }
  })

  test('without --wait it ends validated (exit 0) and says how to follow; results of an unfinished batch are exit 3', async () => {
    const input = inputFile('queued.jsonl', chatLines(5, SLUG))
    const r = await runGridkeep(['submit', input], { env: keyed() })
    expect(r.code).toBe(0)
    const id = r.lines.find((l) => l.event === 'created').batch_id
    expect(r.lines.at(-1)).toEqual({
      event: 'batch',
      batch_id: id,
      status: 'validated',
      request_counts: { total: 5, completed: 0, failed: 0 },
      shards: null,
      attempts: 0,
      // docs/api.md §6: why it waits, in the server's words.
      waiting: expect.objectContaining({ reason: expect.any(String), message: expect.any(String) }),
      requests_per_second: null,
      eta_seconds: null,
    })
    expect(r.stderr).toContain(`follow it: gridkeep wait ${id}`)
    const shown = await runOnTerminal(['status', id], { env: keyed() })
    expect(shown.screen).toMatch(/waiting\s+\S/)
    const results = await runGridkeep(['results', id], { env: keyed() })
    expect([results.code, results.stderr]).toEqual([
      3,
      expect.stringContaining(`is validated, not completed`),
    ])
  })
})

describe('lists, status and results', () => {
  test('batches, status, results, files and models: JSON lines in a pipe, tables on a terminal', async () => {
    expect(completedBatch?.status).toBe('completed')
    const id = completedBatch.id as string
    const env = keyed()
    const batches = await runGridkeep(['batches', '--status', 'completed'], { env })
    expect(batches.code).toBe(0)
    expect(batches.lines.map((b) => b.id)).toContain(id)
    expect(batches.lines.every((b) => b.status === 'completed')).toBe(true)

    const status = await runGridkeep(['status', id], { env })
    expect(status.lines).toEqual([completedBatch])

    const results = await runGridkeep(['results', id], { env })
    expect(results.code).toBe(0)
    const content = (
      await server.req('GET', `/v1/files/${completedBatch.output_file_id}/content`, { token: user.token })
    ).text
    expect(results.stdout).toBe(content)
    const errors = join(dir, 'again-errors.jsonl')
    const both = await runGridkeep(['results', id, '-o', join(dir, 'again.jsonl'), '--errors', errors], {
      env,
    })
    expect(both.code).toBe(0)
    expect(readFileSync(join(dir, 'again.jsonl'), 'utf8')).toBe(content)
    expect(jsonl(errors)).toHaveLength(5)

    const files = await runGridkeep(['files', '--purpose', 'batch_output', '--limit', '100'], { env })
    expect(files.lines.map((f) => f.id)).toEqual(
      expect.arrayContaining([completedBatch.output_file_id, completedBatch.error_file_id]),
    )
    const models = await runGridkeep(['models'], { env })
    expect(models.lines.find((m) => m.id === SLUG)).toMatchObject({
      id: SLUG,
      available: expect.any(Boolean),
    })
    const available = await runGridkeep(['models', '--available'], { env })
    expect(available.lines.every((m) => m.available === true)).toBe(true)

    const table = await runOnTerminal(['batches', '--status', 'completed'], { env })
    expect(table.code).toBe(0)
    expect(table.screen).toMatch(/BATCH\s+STATUS\s+MODEL\s+DONE\s+FAILED\s+CREATED/)
    expect(table.screen).toMatch(new RegExp(`${id}\\s+completed\\s+${SLUG}\\s+50/50\\s+5`))
    const shown = await runOnTerminal(['status', id], { env })
    expect(shown.screen).toMatch(/status\s+completed/)
    expect(shown.screen).toMatch(/shards\s+\d+: 0 waiting, 0 running, \d+ done/)
    // docs/api.md §6 `usage`: the tokens, and the share of prompt tokens the engine served from cache.
    const u = completedBatch.usage
    expect(u.input_tokens).toBeGreaterThan(0)
    const share = Math.floor((u.input_tokens_details.cached_tokens * 100) / u.input_tokens)
    expect(shown.screen).toMatch(
      new RegExp(
        `tokens\\s+${u.input_tokens} prompt \\(${share} % from cache\\), ${u.output_tokens} completion`,
      ),
    )
  })
})

describe('gridkeep audit', () => {
  test("the entries of the orgs the key's user owns, filtered; the next page keeps the filters; bad filters", async () => {
    const env = keyed()
    const second = await makeWorkerKey(server, user, user.personalOrgId)
    const lines = await runGridkeep(['audit', '--action', 'key.worker.*'], { env })
    expect(lines.code).toBe(0)
    expect(lines.lines.map((e) => [e.action, e.org_id])).toContainEqual([
      'key.worker.created',
      user.personalOrgId,
    ])
    expect(lines.lines[0]).toMatchObject({
      object: 'audit_event',
      action: 'key.worker.created',
      target: { kind: 'key', id: second.id },
      actor: { kind: 'user', id: user.id },
    })
    expect(lines.lines.every((e) => e.action.startsWith('key.worker.'))).toBe(true)
    const byTarget = await runGridkeep(['audit', '--target', second.id, '--start', '2000-01-01'], { env })
    expect(byTarget.lines.map((e) => e.target.id)).toEqual([second.id])

    const table = await runOnTerminal(['audit', '--action', 'key.worker.*', '--limit', '1'], { env })
    expect(table.code).toBe(0)
    expect(table.screen).toMatch(/TIME\s+ACTION\s+ACTOR\s+TARGET\s+ORG\s+FROM/)
    expect(table.screen).toMatch(new RegExp(`key\\.worker\\.created\\s+${user.id}\\s+${second.id}`))
    const more = /more: gridkeep audit --action 'key\.worker\.\*' --after (aud_\w+)/.exec(table.screen)
    expect(more?.[1]).toBe(lines.lines[0].id)

    const badTime = await runGridkeep(['audit', '--start', 'yesterday'], { env })
    expect(badTime.code).toBe(2)
    expect(badTime.stderr).toContain('--start')
    const badAction = await runGridkeep(['audit', '--action', 'nope'], { env })
    expect(badAction.code).toBe(3)
    expect(badAction.lines.at(-1)).toMatchObject({ event: 'error', status: 400, code: 'invalid_value' })
  })
})

describe('--input-order (docs/api.md §6 "Output order")', () => {
  test('the files come in execution order; results, wait -o and submit --wait -o with --input-order write them in the input’s', async () => {
    const worker = daemon()
    // 5 documents × 6 questions, question-major: the batch runs document-major, in shards. Two
    // requests fail, d1-q0 and d0-q3: the input has d1-q0 first, the execution order d0-q3.
    const doc = (d: number) => `Document ${d}. ${'It is about many things at once. '.repeat(20)}`
    const failing = new Set(['d1-q0', 'd0-q3'])
    const lines: string[] = []
    for (let q = 0; q < 6; q++)
      for (let d = 0; d < 5; d++)
        lines.push(
          JSON.stringify({
            custom_id: `d${d}-q${q}`,
            body: {
              model: SLUG,
              messages: [
                {
                  role: 'user',
                  content: `${doc(d)} Question ${q}${failing.has(`d${d}-q${q}`) ? ' #400' : ''}`,
                },
              ],
            },
          }),
        )
    const ids = lines.map((l) => JSON.parse(l).custom_id as string)
    const succeeded = ids.filter((x) => !failing.has(x))
    const input = inputFile('question-major.jsonl', lines)
    const submitted = join(dir, 'submitted.jsonl')
    const submittedErrors = join(dir, 'submitted-errors.jsonl')
    try {
      const r = await runGridkeep(
        [
          'submit',
          input,
          '--wait',
          '--interval',
          '0.1',
          '-o',
          submitted,
          '--errors',
          submittedErrors,
          '--input-order',
        ],
        { env: keyed() },
      )
      expect(r.code).toBe(0)
      expect(r.lines.at(-1)).toMatchObject({ event: 'done', output: submitted, input_order: true })
      const id = r.lines.find((l) => l.event === 'created').batch_id
      const plain = join(dir, 'plain.jsonl')
      const plainErrors = join(dir, 'plain-errors.jsonl')
      const ordered = join(dir, 'ordered.jsonl')
      const orderedErrors = join(dir, 'ordered-errors.jsonl')
      expect(
        (await runGridkeep(['results', id, '-o', plain, '--errors', plainErrors], { env: keyed() })).code,
      ).toBe(0)
      const res = await runGridkeep(
        ['results', id, '-o', ordered, '--errors', orderedErrors, '--input-order'],
        { env: keyed() },
      )
      expect(res.code).toBe(0)
      expect(res.lines.at(-1)).toMatchObject({ event: 'done', output: ordered, input_order: true })
      // As the batch ran (document-major, each request as it finished), not in the input's order:
      // both files.
      const ran = jsonl(plain).map((l) => l.custom_id)
      expect(new Set(ran)).toEqual(new Set(succeeded))
      expect(ran).not.toEqual(succeeded)
      // The two failures in the order they finished, which concurrent requests make either way.
      expect(new Set(jsonl(plainErrors).map((l) => l.custom_id))).toEqual(failing)
      // Restored: the input's order, in both files, by each command.
      expect(jsonl(ordered).map((l) => l.custom_id)).toEqual(succeeded)
      expect(jsonl(orderedErrors).map((l) => l.custom_id)).toEqual(['d1-q0', 'd0-q3'])
      expect(readFileSync(submitted, 'utf8')).toBe(readFileSync(ordered, 'utf8'))
      expect(readFileSync(submittedErrors, 'utf8')).toBe(readFileSync(orderedErrors, 'utf8'))
      const waited = join(dir, 'waited.jsonl')
      const w = await runGridkeep(['wait', id, '-o', waited, '--input-order'], { env: keyed() })
      expect(w.code).toBe(0)
      expect(readFileSync(waited, 'utf8')).toBe(readFileSync(ordered, 'utf8'))
      // To stdout as well.
      const out = await runGridkeep(['results', id, '--input-order'], { env: keyed() })
      expect(out.lines.map((l) => l.custom_id)).toEqual(succeeded)
      // --input-order orders the files -o and --errors write: alone, wait has nothing to order.
      const alone = await runGridkeep(['wait', id, '--input-order'], { env: keyed() })
      expect(alone.code).toBe(2)
      expect(alone.stderr).toContain('--input-order orders the files -o and --errors write')

      // The input file deleted (its owner may, once the batch is finished): the order cannot be
      // restored — exit 3 (invalid), saying which file is gone; nothing is written.
      const batch = await getBatch(id)
      const del = await server.req('DELETE', `/v1/files/${batch.input_file_id}`, { token: user.token })
      expect(del.status).toBe(200)
      const gone = join(dir, 'gone.jsonl')
      for (const args of [
        ['results', id, '-o', gone, '--input-order'],
        ['wait', id, '-o', gone, '--input-order'],
      ]) {
        const g = await runGridkeep(args, { env: keyed() })
        expect([args, g.code]).toEqual([args, 3])
        expect(g.stderr).toContain(
          `the input file ${batch.input_file_id} of batch ${id} is gone: its order cannot be restored`,
        )
        expect(g.lines.at(-1)).toMatchObject({
          event: 'error',
          exit_code: 3,
          input_file_id: batch.input_file_id,
        })
        expect(existsSync(gone)).toBe(false)
      }
      // Without --input-order the results are still there, in execution order.
      expect((await runGridkeep(['results', id, '-o', gone], { env: keyed() })).code).toBe(0)
      expect(jsonl(gone).map((l) => l.custom_id)).toEqual(ran)
    } finally {
      await worker.stop()
    }
  })
})

describe('exit codes', () => {
  test('a revoked key is exit 4 (auth), and so is a worker key', async () => {
    const k = await makePersonalKey(server, user)
    await server.req('DELETE', `/v1/users/me/api-keys/${k.id}`, { token: user.token })
    const input = inputFile('auth.jsonl', chatLines(1, SLUG))
    for (const args of [['batches'], ['submit', input], ['status', 'batch_x']]) {
      const r = await runGridkeep(args, { env: keyed({ GRIDKEEP_API_KEY: k.key }) })
      expect([args, r.code]).toEqual([args, 4])
      expect(r.lines.at(-1)).toMatchObject({
        event: 'error',
        exit_code: 4,
        status: 401,
        code: 'api_key_revoked',
      })
      expect(r.stderr).toContain('api_key_revoked')
    }
    const worker = await runGridkeep(['batches'], { env: keyed({ GRIDKEEP_API_KEY: workerKey }) })
    expect(worker.code).toBe(4)
  })

  test('a server that is down is exit 5 (unreachable)', async () => {
    const down = `http://127.0.0.1:${freePort()}`
    const input = inputFile('down.jsonl', chatLines(1, SLUG))
    for (const args of [['batches'], ['submit', input, '--wait'], ['wait', 'batch_x'], ['models']]) {
      const r = await runGridkeep(args, { env: keyed({ GRIDKEEP_SERVER: down }) })
      expect([args, r.code]).toEqual([args, 5])
      expect(r.stderr).toContain(`cannot reach ${down}`)
      expect(r.lines.at(-1)).toMatchObject({ event: 'error', exit_code: 5 })
    }
    const login = await runGridkeep(['login', '--server', down, '--key', apiKey], { env: home() })
    expect(login.code).toBe(5)
  })

  test('bad usage is exit 2; an unknown batch or a missing file is exit 3', async () => {
    for (const args of [
      ['submit'],
      ['submit', 'a.jsonl', 'b.jsonl'],
      ['batches', '--bogus'],
      ['wait'],
      ['status', 'batch_x', '--interval'],
      ['submit', 'a.jsonl', '--interval', '0'],
      ['submit', 'a.jsonl', '--metadata', 'no-equals-sign'],
      ['login', '--password-stdin'],
      ['login', '--server', 'ftp://example.test'],
      // Where the results cannot go is said before anything is uploaded.
      ['submit', inputFile('ok.jsonl', chatLines(1, SLUG)), '-o', join(dir, 'no-such-dir', 'out.jsonl')],
    ]) {
      const r = await runGridkeep(args, { env: keyed() })
      expect([args, r.code]).toEqual([args, 2])
      expect(r.stderr).toContain(`Run 'gridkeep ${args[0]} --help'`)
    }
    // A login with nobody to answer its questions.
    expect((await runGridkeep(['login', '--server', server.url], { env: home(), stdin: '' })).code).toBe(2)
    const unknown = await runGridkeep(['status', 'batch_does_not_exist'], { env: keyed() })
    expect([unknown.code, unknown.lines.at(-1)?.status]).toEqual([3, 404])
    const missing = await runGridkeep(['submit', join(dir, 'no-such-file.jsonl')], { env: keyed() })
    expect([missing.code, missing.stderr]).toEqual([3, expect.stringContaining('cannot read')])
    // --endpoint is the server's to judge: passed through as given, refused there, the upload kept.
    const endpoint = await runGridkeep(
      ['submit', inputFile('ep.jsonl', chatLines(1, SLUG)), '--endpoint', '/v1/nope'],
      {
        env: keyed(),
      },
    )
    expect([endpoint.code, endpoint.lines.at(-1)]).toEqual([
      3,
      expect.objectContaining({ event: 'error', status: 400, file_id: expect.stringMatching(/^file-/) }),
    ])
    expect(endpoint.stderr).toContain('the uploaded file stays as file-')
    // A file the server refuses while it is still being sent (docs/api.md §5: .jsonl only).
    const table = join(dir, 'table.csv')
    writeFileSync(table, 'a,b\n'.repeat(1_000_000))
    const refused = await runGridkeep(['submit', table], { env: keyed() })
    expect([refused.code, refused.lines.at(-1)]).toEqual([
      3,
      expect.objectContaining({ event: 'error', status: 400, code: 'invalid_file_type' }),
    ])
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200)
  })

  test('--help lists the client commands beside the server ones; every client command has its own --help', async () => {
    const help = await runGridkeep(['--help'])
    expect(help.code).toBe(0)
    const commands = ['login', 'logout', 'submit', 'wait', 'status', 'results', 'batches', 'files', 'models']
    for (const c of ['serve', 'worker', 'catalogue', 'backup', 'migrate', 'version', ...commands])
      expect(help.stdout).toMatch(new RegExp(`^  ${c}\\s+\\S`, 'm'))
    for (const c of commands) {
      const r = await runGridkeep([c, '--help'])
      expect([c, r.code, r.stdout.startsWith(`Usage: gridkeep ${c}`)]).toEqual([c, 0, true])
    }
  })
})
