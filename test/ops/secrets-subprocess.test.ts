import { Database } from 'bun:sqlite'
import { describe, expect, test } from 'bun:test'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import {
  baseEnv,
  dataDirs,
  jsonLines,
  PROCESS_TEST_TIMEOUT,
  type ServerProcess,
  spawnServer,
  startServerProcess,
} from '../helpers/ops'

// Issue 6: no secret ever reaches a real server's output. Servers run as subprocesses through a
// flow that handles every kind of secret — passwords (signup, login, change, reset, the first
// admin's), JWTs, personal and worker keys, the mailed reset token, the JWT secret, the metrics
// token, an SMTP password — including failures and a 500, and the test scans everything the
// process wrote to stdout and stderr.

const newDataDir = dataDirs('secrets')

function client(server: ServerProcess, secrets: Set<string>) {
  return async (method: string, path: string, opts: { body?: unknown; token?: string } = {}) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: {
        ...(opts.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
      },
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    })
    const text = await res.text()
    const body = text.startsWith('{') ? JSON.parse(text) : text
    for (const field of ['access_token', 'key'] as const) {
      const value = body?.[field]
      if (typeof value === 'string') secrets.add(value)
    }
    return { status: res.status, body, requestId: res.headers.get('x-request-id') }
  }
}

/** Every secret absent from the output, and no raw key or JWT of any kind in it either. */
function expectNoSecrets(output: string, secrets: Set<string>) {
  expect(secrets.size).toBeGreaterThan(0)
  const leaked = [...secrets].filter((s) => output.includes(s)).map((s) => `${s.slice(0, 6)}…`)
  expect(leaked).toEqual([])
  expect(output).not.toMatch(/gk-[0-9A-Za-z]{40}/)
  expect(output).not.toMatch(/eyJ[\w-]{5,}\.eyJ[\w-]{5,}\./)
}

function readMailedToken(dataDir: string): string {
  const outbox = join(dataDir, 'outbox')
  const files = readdirSync(outbox)
    .filter((f) => f.endsWith('.eml'))
    .sort()
  const mail = readFileSync(join(outbox, files.at(-1)!), 'utf8')
  const token = /reset-password:\r?\n([A-Za-z0-9_-]{20,})\r?\n/.exec(mail)?.[1]
  expect(token).toBeDefined()
  return token!
}

const waitForMail = async (dataDir: string, count: number) => {
  for (let i = 0; i < 500; i++) {
    try {
      if (readdirSync(join(dataDir, 'outbox')).filter((f) => f.endsWith('.eml')).length >= count) return
    } catch {}
    await Bun.sleep(10)
  }
  throw new Error('no mail in the outbox')
}

describe('no secret in a real server process output', () => {
  test(
    'accounts, keys, password reset through the outbox, metrics token, a 500',
    async () => {
      const secrets = new Set<string>()
      const remember = (s: string) => {
        secrets.add(s)
        return s
      }
      const dataDir = newDataDir()
      const adminPassword = remember('Admin-Initial-Passw0rd!')
      const jwtSecret = remember('jwt-secret-for-this-test-0123456789-abcdef')
      const metricsToken = remember('metrics-token-for-this-test-42')
      const server = await startServerProcess(
        baseEnv(dataDir, {
          ADMIN_PASSWORD: adminPassword,
          JWT_SECRET: jwtSecret,
          METRICS_TOKEN: metricsToken,
          LOG_LEVEL: 'debug',
        }),
      )
      const call = client(server, secrets)

      // The first superadmin: login, the gate, change-password.
      let res = await call('POST', '/v1/auth/login', {
        body: { email: 'admin@localhost', password: adminPassword },
      })
      expect(res.status).toBe(200)
      const adminFirstJwt = res.body.access_token
      expect((await call('GET', '/v1/orgs', { token: adminFirstJwt })).status).toBe(403)
      const adminPassword2 = remember('Admin-Changed-Passw0rd!')
      res = await call('POST', '/v1/auth/change-password', {
        token: adminFirstJwt,
        body: { current_password: adminPassword, new_password: adminPassword2 },
      })
      expect(res.status).toBe(200)
      expect((await call('GET', '/v1/admin/users', { token: res.body.access_token })).status).toBe(200)

      // A user: signup, a wrong then a right login.
      const email = 'ada@example.test'
      const password = remember('Ada-Signup-Passw0rd!')
      expect(
        (await call('POST', '/v1/auth/signup', { body: { email, password, full_name: 'Ada' } })).status,
      ).toBe(200)
      const wrong = remember('Not-Adas-Passw0rd!')
      expect((await call('POST', '/v1/auth/login', { body: { email, password: wrong } })).status).toBe(401)
      res = await call('POST', '/v1/auth/login', { body: { email, password } })
      const jwt = res.body.access_token as string
      const orgId =
        res.body.user && (await call('GET', '/v1/auth/me', { token: jwt })).body.memberships[0].org_id

      // Personal keys: create, use, regenerate, use where refused.
      res = await call('POST', '/v1/users/me/api-keys', { token: jwt, body: { name: 'laptop' } })
      expect(res.status).toBe(201)
      const personal = res.body.key as string
      res = await call('POST', '/v1/auth/api-keys/regenerate', { token: personal, body: {} })
      expect(res.status).toBe(201)
      expect((await call('GET', '/v1/orgs', { token: res.body.key })).status).toBe(401)
      expect((await call('GET', '/v1/auth/me', { token: personal })).status).toBe(401) // revoked and wrong type

      // A worker key: create, then present it where it is refused and where it belongs.
      res = await call('POST', `/v1/orgs/${orgId}/api-keys`, { token: jwt, body: { name: 'fleet' } })
      expect(res.status).toBe(201)
      const workerKey = res.body.key as string
      expect((await call('GET', '/v1/auth/me', { token: workerKey })).status).toBe(401)
      await call('POST', '/workers/poll', { token: workerKey, body: { worker_id: 'wrk_x' } })
      // A malformed credential that looks like one.
      await call('GET', '/v1/auth/me', { token: `${workerKey}x` })

      // Forgot / reset password: the token comes from the outbox file, never from the log.
      expect((await call('POST', '/v1/auth/forgot-password', { body: { email } })).status).toBe(202)
      await waitForMail(dataDir, 1)
      const resetToken = remember(readMailedToken(dataDir))
      const password2 = remember('Ada-Reset-Passw0rd!')
      expect(
        (
          await call('POST', '/v1/auth/reset-password', {
            body: { token: resetToken, new_password: password2 },
          })
        ).status,
      ).toBe(200)
      expect(
        (
          await call('POST', '/v1/auth/reset-password', {
            body: { token: resetToken, new_password: password2 },
          })
        ).status,
      ).toBe(400) // single use
      res = await call('POST', '/v1/auth/login', { body: { email, password: password2 } })
      const password3 = remember('Ada-Changed-Passw0rd!')
      expect(
        (
          await call('POST', '/v1/auth/change-password', {
            token: res.body.access_token,
            body: { current_password: password2, new_password: password3 },
          })
        ).status,
      ).toBe(200)

      // The metrics token, right and wrong.
      expect((await call('GET', '/metrics', { token: metricsToken })).status).toBe(200)
      expect((await call('GET', '/metrics', { token: `${metricsToken}-wrong` })).status).toBe(401)

      // A 500 on a request carrying a reset token and a password: the table it needs is gone.
      const db = new Database(join(dataDir, 'gridkeep.db'))
      db.exec('PRAGMA busy_timeout = 5000')
      db.exec('DROP TABLE password_reset_tokens')
      db.close()
      const password4 = remember('Ada-Never-Set-Passw0rd!')
      res = await call('POST', '/v1/auth/reset-password', {
        body: { token: resetToken, new_password: password4 },
      })
      expect(res.status).toBe(500)
      const failedId = res.requestId

      server.proc.kill('SIGTERM')
      expect(await server.exited).toBe(0)
      const output = server.output()
      // The 500: one request line and one error line, both with its request id.
      const forFailed = jsonLines(output).filter((l) => l.request_id === failedId)
      expect(forFailed.map((l) => [l.level, l.msg, l.status])).toEqual([
        ['error', 'unhandled error', undefined],
        ['info', 'request', 500],
      ])
      expect(jsonLines(output).filter((l) => l.msg === 'request').length).toBeGreaterThan(20)
      expectNoSecrets(output, secrets)
    },
    PROCESS_TEST_TIMEOUT,
  )

  test(
    'an SMTP password, and the generated first-admin password (printed once to stderr, never logged)',
    async () => {
      const secrets = new Set<string>()
      const smtpPassword = 'Smtp-Passw0rd-In-Url'
      secrets.add(smtpPassword)

      // Malformed: refused at start with one line that does not echo it.
      const bad = await spawnServer(baseEnv(newDataDir(), { SMTP_URL: `smtp//mailer:${smtpPassword}@` }))
      expect(await bad.exited).toBe(2)
      expect(bad.output().trim()).toBe(
        'gridkeep: invalid configuration: SMTP_URL: expected an smtp:// or smtps:// URL with a host (got "***")',
      )

      // Well formed but unreachable: the mail fails and is logged without the URL's password.
      const env = baseEnv(newDataDir(), { SMTP_URL: `smtp://mailer:${smtpPassword}@127.0.0.1:9` })
      delete env.ADMIN_PASSWORD
      const server = await startServerProcess(env)
      const call = client(server, secrets)
      // stderr is a separate pipe: the console line may arrive after the listening log line.
      await server.waitFor('with password: ')
      await server.waitFor('It is shown only this once')
      const printed = /created superadmin admin@localhost with password: (\S+)/.exec(server.output())?.[1]
      expect(printed).toBeDefined()
      const generated = printed!
      const res = await call('POST', '/v1/auth/login', {
        body: { email: 'admin@localhost', password: generated },
      })
      expect(res.status).toBe(200)
      expect(
        (await call('POST', '/v1/auth/forgot-password', { body: { email: 'admin@localhost' } })).status,
      ).toBe(202)
      await server.waitFor('reset mail failed')
      server.proc.kill('SIGTERM')
      expect(await server.exited).toBe(0)

      const output = server.output()
      expectNoSecrets(output, secrets)
      // The documented exception: the generated password appears exactly once, on the console
      // line meant for the operator, and in no structured log line.
      expect(output.split(generated).length - 1).toBe(1)
      expect(jsonLines(output).some((l) => JSON.stringify(l).includes(generated))).toBe(false)
    },
    PROCESS_TEST_TIMEOUT,
  )
})
