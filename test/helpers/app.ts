import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createApp } from '../../src/app'
import { createServer, type Server } from '../../src/compose'
import { type Config, loadConfig } from '../../src/config'
import { type RunningServer, type StartOptions, startServer } from '../../src/index'
import { type ManualClock, manualClock } from '../../src/lib/clock'
import type { Mail, Mailer } from '../../src/lib/mailer'
import { createPasswords } from '../../src/lib/passwords'
import { takePostgresDatabase, testEngine } from './postgres'
import { testStorageEnv } from './s3'
import { rememberSecretsIn } from './secrets'

// Tests build an app on a temporary database with a fixed clock (ARCHITECTURE.md rule 12) and talk to it
// through app.handle(new Request(...)); a real listening server is used where concurrency,
// streaming or the openai SDK is involved.

export const cheapPasswords = () => createPasswords({ memoryCost: 256, timeCost: 1 })

export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({
    DATA_DIR: env.DATA_DIR ?? mkdtempSync(join(tmpdir(), 'gridkeep-test-')),
    JWT_SECRET: 'test-secret-test-secret-test-secret-0123456789',
    ADMIN_PASSWORD: 'admin-password-1',
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'debug',
    // The free-space floor is off: the machine's own disk must not decide a test (the tests of
    // docs/api.md §15 set it and stand in for the disk).
    MIN_FREE_DISK_BYTES: '0',
    // DATABASE_URL: '' keeps a test on SQLite in the PostgreSQL run.
    ...(testEngine === 'postgres' && env.DATABASE_URL === undefined
      ? { DATABASE_URL: takePostgresDatabase(), DATABASE_POOL_SIZE: '4' }
      : {}),
    ...testStorageEnv(),
    ...env,
  })
}

export interface CapturingMailer extends Mailer {
  sent: Mail[]
}

export function capturingMailer(): CapturingMailer {
  const sent: Mail[] = []
  return { sent, send: async (m) => void sent.push(m), close() {} }
}

export interface Res<T = any> {
  status: number
  body: T
  text: string
  headers: Headers
}

export interface ReqOptions {
  body?: unknown
  token?: string
  headers?: Record<string, string>
  /** A raw body (multipart, text) instead of JSON. */
  raw?: NonNullable<RequestInit['body']>
}

export interface TestApp {
  app: ReturnType<typeof createApp>
  deps: Server
  clock: ManualClock
  config: Config
  mail: CapturingMailer
  req<T = any>(method: string, path: string, opts?: ReqOptions): Promise<Res<T>>
  close(): void
}

export function buildRequest(base: string, method: string, path: string, opts: ReqOptions = {}): Request {
  const headers: Record<string, string> = { ...opts.headers }
  if (opts.token) headers.authorization = `Bearer ${opts.token}`
  let body: NonNullable<RequestInit['body']> | undefined = opts.raw
  if (typeof opts.raw === 'string') headers['content-length'] ??= String(Buffer.byteLength(opts.raw))
  if (opts.body !== undefined) {
    rememberSecretsIn(opts.body)
    headers['content-type'] ??= 'application/json'
    body = JSON.stringify(opts.body)
    // What every HTTP client sends with a string body (Request does not add it in-process).
    headers['content-length'] ??= String(Buffer.byteLength(body))
  }
  return new Request(base + path, { method, headers, body })
}

export async function readRes(res: Response): Promise<Res> {
  const text = await res.text()
  let body: any = text
  if ((res.headers.get('content-type') ?? '').includes('json')) {
    try {
      body = JSON.parse(text)
    } catch {}
  }
  rememberSecretsIn(body)
  return { status: res.status, body, text, headers: res.headers }
}

export function makeTestApp(env: Record<string, string> = {}, opts: { clock?: ManualClock } = {}): TestApp {
  const config = testConfig(env)
  const clock = opts.clock ?? manualClock()
  const mail = capturingMailer()
  const deps = createServer(config, { clock, mailer: mail, passwords: cheapPasswords() })
  const app = createApp(deps)
  return {
    app,
    deps,
    clock,
    config,
    mail,
    req: async (method, path, o) =>
      readRes(await app.handle(buildRequest('http://localhost', method, path, o))),
    close() {
      void deps.store.close()
      rmSync(config.DATA_DIR, { recursive: true, force: true })
    },
  }
}

export interface TestServer extends RunningServer {
  clock: ManualClock
  config: Config
  mail: CapturingMailer
  req<T = any>(method: string, path: string, opts?: ReqOptions): Promise<Res<T>>
}

/** A real listening server on 127.0.0.1 and a free port. */
export async function startTestServer(
  env: Record<string, string> = {},
  opts: { clock?: ManualClock; mailer?: Mailer } & StartOptions = {},
): Promise<TestServer> {
  const config = testConfig(env)
  const clock = opts.clock ?? manualClock()
  const mail = capturingMailer()
  // With SMTP_URL set, the server's real nodemailer transport is used.
  const mailer = opts.mailer ?? (env.SMTP_URL ? undefined : mail)
  const deps = createServer(config, { clock, mailer, passwords: cheapPasswords() })
  const running = await startServer(config, deps, opts)
  return {
    ...running,
    clock,
    config,
    mail,
    req: async (method, path, o) => readRes(await fetch(buildRequest(running.url, method, path, o))),
    async stop() {
      const outcome = await running.stop()
      rmSync(config.DATA_DIR, { recursive: true, force: true })
      return outcome
    },
  }
}

/**
 * Resolves once every request served with `deps` has been logged and counted: the open-request
 * count reaches 0 where the log line and the metrics are written (src/http/lifecycle.ts), as each
 * response is ready, so a request whose response is in hand has been recorded.
 */
export async function allRequestsRecorded(deps: Server): Promise<void> {
  for (let turns = 0; deps.requestsOpen > 0; turns++) {
    if (turns > 1000) throw new Error('a request was never recorded')
    await new Promise((resolve) => setImmediate(resolve))
  }
}
