import { Database } from 'bun:sqlite'
import { describe, expect, test } from 'bun:test'
import { join } from 'node:path'
import { startServer } from '../../src/index'
import { InstanceLockedError } from '../../src/ops/instance-lock'
import { startTestServer, testConfig } from '../helpers/app'
import {
  baseEnv,
  dataDirs,
  jsonLines,
  PROCESS_TEST_TIMEOUT,
  spawnServer,
  startServerProcess,
} from '../helpers/ops'

// Issue 6, lifecycle: graceful shutdown on SIGTERM/SIGINT (drain, exit 0), one server per database
// file (and no stale lock after SIGKILL), data surviving restarts.

const newDataDir = dataDirs('life')

/**
 * An HTTP/1.1 request over a raw socket, so the test decides when the second half of the body goes
 * out. A first complete request on the same connection proves the server has accepted it.
 */
async function openSlowRequest(url: string, path: string, body: string) {
  const { hostname, port } = new URL(url)
  let received = ''
  let onData = () => {}
  let closed!: () => void
  const done = new Promise<void>((r) => {
    closed = r
  })
  const socket = await Bun.connect({
    hostname,
    port: Number(port),
    socket: {
      data(_s, chunk) {
        received += new TextDecoder().decode(chunk)
        onData()
      },
      close: () => closed(),
      error: () => closed(),
    },
  })
  await new Promise<void>((resolve) => {
    onData = () => received.includes('{"status":"ok"}') && resolve()
    socket.write(`GET /healthz HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`)
    socket.flush()
  })
  received = ''
  const half = Math.floor(body.length / 2)
  // With `Expect: 100-continue` the server answers "100 Continue" once its handler has taken the
  // request: from then on the request is in flight.
  await new Promise<void>((resolve) => {
    onData = () => received.includes('100 Continue\r\n\r\n') && resolve()
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n` +
        body.slice(0, half),
    )
    socket.flush()
  })
  received = ''
  return {
    finish() {
      socket.write(body.slice(half))
      socket.flush()
    },
    async response() {
      await done
      const [head, ...rest] = received.split('\r\n\r\n')
      return { status: Number(head?.split(' ')[1]), body: rest.join('\r\n\r\n') }
    },
  }
}

const refusesConnections = (url: string) =>
  fetch(`${url}/healthz`).then(
    () => false,
    () => true,
  )

async function login(url: string, email: string, password: string) {
  const res = await fetch(`${url}/v1/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password }),
  })
  return res.status
}

describe('graceful shutdown (a real server process)', () => {
  test(
    'SIGTERM stops accepting, lets the in-flight request finish and be logged, exits 0; data survives',
    async () => {
      const dataDir = newDataDir()
      const server = await startServerProcess(baseEnv(dataDir))
      const user = { email: 'slow@example.test', password: 'slow-password-1', full_name: 'Slow' }
      const slow = await openSlowRequest(server.url, '/v1/auth/signup', JSON.stringify(user))

      server.proc.kill('SIGTERM')
      await server.waitFor('shutting down')
      expect(await refusesConnections(server.url)).toBe(true)
      slow.finish()
      const res = await slow.response()
      expect(res.status).toBe(200)
      expect(JSON.parse(res.body).email).toBe(user.email)
      expect(await server.exited).toBe(0)

      const lines = jsonLines(server.output())
      const logged = lines.filter((l) => l.msg === 'request' && l.route === '/v1/auth/signup')
      expect(logged).toHaveLength(1)
      expect(logged[0]!.status).toBe(200)
      expect(lines.find((l) => l.msg === 'stopped')).toMatchObject({ drained: true })

      const again = await startServerProcess(baseEnv(dataDir))
      expect(await login(again.url, user.email, user.password)).toBe(200)
      again.proc.kill('SIGTERM')
      expect(await again.exited).toBe(0)
    },
    PROCESS_TEST_TIMEOUT,
  )

  test(
    'SIGTERM ends open batch event streams, so they do not hold the drain; exit 0',
    async () => {
      const dataDir = newDataDir()
      const server = await startServerProcess(baseEnv(dataDir, { SHUTDOWN_TIMEOUT_SECONDS: '20' }))
      const user = { email: 'sse@example.test', password: 'sse-password-1' }
      const post = (path: string, body: unknown) =>
        fetch(`${server.url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        })
      const signup = (await (await post('/v1/auth/signup', { ...user, full_name: 'Sse' })).json()) as {
        id: string
      }
      const { access_token } = (await (await post('/v1/auth/login', user)).json()) as { access_token: string }
      // A batch left `validating` (as after a crash): written beside the server, which has no reason
      // to validate it now, so its event stream stays open until something ends it.
      const db = new Database(join(dataDir, 'gridkeep.db'))
      db.exec('PRAGMA busy_timeout = 5000')
      db.query(
        `INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, status, created_at, updated_at)
         VALUES ('batch_ssestream0000000000000000', ?, 'file-none', '/v1/chat/completions', '24h', 'validating', 1, 1)`,
      ).run(signup.id)
      db.close()

      const res = await fetch(`${server.url}/v1/batches/batch_ssestream0000000000000000/events`, {
        headers: { authorization: `Bearer ${access_token}` },
      })
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toStartWith('text/event-stream')
      const reader = res.body!.getReader()
      const first = new TextDecoder().decode((await reader.read()).value)
      expect(first).toContain('event: status')
      expect(first).toContain('"validating"')

      server.proc.kill('SIGTERM')
      // The server ends the stream: reading reaches its end (no `done`: the batch is still validating).
      let rest = ''
      for (;;) {
        const chunk = await reader.read().catch(() => ({ done: true as const, value: undefined }))
        if (chunk.done) break
        rest += new TextDecoder().decode(chunk.value)
      }
      expect(rest).not.toContain('event: done')
      expect(await server.exited).toBe(0)
      expect(jsonLines(server.output()).find((l) => l.msg === 'stopped')).toMatchObject({ drained: true })
    },
    PROCESS_TEST_TIMEOUT,
  )

  test(
    'SIGINT stops it the same way',
    async () => {
      const server = await startServerProcess(baseEnv(newDataDir()))
      server.proc.kill('SIGINT')
      expect(await server.exited).toBe(0)
      expect(server.output()).toContain('"reason":"SIGINT"')
    },
    PROCESS_TEST_TIMEOUT,
  )
})

describe('one server per database file', () => {
  test(
    'a second server on the same database exits with one clear line and changes nothing',
    async () => {
      const dataDir = newDataDir()
      const first = await startServerProcess(baseEnv(dataDir))
      const second = await spawnServer(baseEnv(dataDir))
      expect(await second.exited).toBe(1)
      const output = second.output().trim()
      expect(output.split('\n')).toHaveLength(1)
      expect(output).toContain('another gridkeep server is already running on')
      expect(output).not.toContain('listening')
      // The first server is unaffected.
      expect((await fetch(`${first.url}/readyz`)).status).toBe(200)
      expect(await login(first.url, 'admin@localhost', 'first-admin-password')).toBe(200)

      // SIGKILL leaves the lock file behind, but not the lock: a restart is not blocked.
      first.proc.kill('SIGKILL')
      await first.exited
      const restarted = await startServerProcess(baseEnv(dataDir))
      expect(await login(restarted.url, 'admin@localhost', 'first-admin-password')).toBe(200)
      restarted.proc.kill('SIGTERM')
      expect(await restarted.exited).toBe(0)
    },
    PROCESS_TEST_TIMEOUT,
  )

  test(
    'a busy port ends the start with one line and exit code 1',
    async () => {
      const first = await startServerProcess(baseEnv(newDataDir()))
      const port = new URL(first.url).port
      const second = await spawnServer(baseEnv(newDataDir(), { PORT: port }))
      expect(await second.exited).toBe(1)
      const lines = second.output().trim().split('\n')
      expect(lines.filter((l) => !l.startsWith('{'))).toEqual([
        expect.stringMatching(/^gridkeep: cannot listen: .*in use/),
      ])
      first.proc.kill('SIGTERM')
      expect(await first.exited).toBe(0)
    },
    PROCESS_TEST_TIMEOUT,
  )

  test(
    'in one process too, and the lock is released by stop()',
    async () => {
      // The instance lock guards a SQLite database file (PostgreSQL takes any number of instances).
      const server = await startTestServer({ DATABASE_URL: '' })
      const config = testConfig({ DATA_DIR: server.config.DATA_DIR, DATABASE_URL: '' })
      await expect(startServer(config)).rejects.toBeInstanceOf(InstanceLockedError)
      // The refused start left the running server alone.
      expect((await server.req('GET', '/readyz')).status).toBe(200)
      expect(server.deps.shutdown.signal.aborted).toBe(false)
      const outcome = await server.stop()
      expect(outcome.drained).toBe(true)
    },
    PROCESS_TEST_TIMEOUT,
  )

  test(
    'after stop() the same database can be served again',
    async () => {
      const config = testConfig({ DATA_DIR: newDataDir() })
      const a = await startServer(config)
      await a.stop()
      const b = await startServer(config)
      expect((await fetch(`${b.url}/readyz`)).status).toBe(200)
      await b.stop()
    },
    PROCESS_TEST_TIMEOUT,
  )
})

describe('stop()', () => {
  test(
    'is idempotent, aborts the shutdown signal for streams and loops, closes the database',
    async () => {
      const server = await startTestServer()
      const first = server.stop()
      const second = server.stop()
      expect(server.deps.shutdown.signal.aborted).toBe(true)
      expect(await first).toEqual(await second)
      await expect(server.deps.store.ping()).rejects.toThrow()
    },
    PROCESS_TEST_TIMEOUT,
  )

  test(
    'a request that never completes is cut after SHUTDOWN_TIMEOUT_SECONDS',
    async () => {
      const server = await startTestServer({ SHUTDOWN_TIMEOUT_SECONDS: '1' })
      const hung = await openSlowRequest(server.url, '/v1/auth/signup', JSON.stringify({ email: 'x@y.z' }))
      const outcome = await server.stop()
      expect(outcome.drained).toBe(false)
      const res = await hung.response()
      expect(res.status).toBeNaN() // the connection was closed without an answer
    },
    PROCESS_TEST_TIMEOUT,
  )
})
