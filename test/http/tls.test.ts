import { afterAll, beforeAll, describe, expect, spyOn, test } from 'bun:test'
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { connect } from 'node:tls'
import { ConfigError, loadConfig } from '../../src/config'
import { HSTS } from '../../src/http/lifecycle'
import { startServer } from '../../src/index'
import {
  buildRequest,
  type ReqOptions,
  readRes,
  startTestServer,
  type TestServer,
  testConfig,
} from '../helpers/app'
import { makePersonalKey, makeUser, makeWorkerKey } from '../helpers/builders'
import { ownProcess } from '../helpers/children'
import { chatLines } from '../helpers/daemon'
import { startFakeRuntime } from '../helpers/fake-runtime'
import { capturedLogLines, rememberSecret } from '../helpers/secrets'
import { type LabCa, makeLabCa, servedFingerprint } from '../helpers/tls'
import { until } from '../helpers/until'
import { spawnWorker, type WorkerProcess } from '../helpers/worker-process'

// The server speaking HTTPS itself (docs/deployment.md "TLS on the binary"), with a certificate of a
// lab's own CA made by openssl here: the worker daemon, the terminal client and the official
// `openai` SDK, each in its own process and trusting only that CA as a user would give it, complete
// a batch; a renewed certificate is served to the next connection without a restart.

const REPO = resolve(import.meta.dir, '../..')
const MODEL = 'tls-chat-model-q4km'
const RUNTIME_MODEL = 'tls/runtime-model'
const dir = mkdtempSync(join(tmpdir(), 'gk-tls-'))
let ca: LabCa
let rootPem: string
let first: ReturnType<LabCa['issue']>
/** The files the server is configured with (a renewal replaces them). */
const certFile = join(dir, 'live-fullchain.pem')
const keyFile = join(dir, 'live-privkey.pem')
let server: TestServer
let rt: ReturnType<typeof startFakeRuntime>
let daemon: WorkerProcess
let apiKey: string

/** What the test's own requests use: the test server's `req`, trusting the lab's CA. */
const target = () => ({
  deps: server.deps,
  req: async (method: string, path: string, o?: ReqOptions) =>
    readRes(await fetch(buildRequest(server.url, method, path, o), { tls: { ca: rootPem } })),
})

beforeAll(async () => {
  ca = makeLabCa(dir)
  rootPem = readFileSync(ca.rootFile, 'utf8')
  first = ca.issue('first')
  copyFileSync(first.certFile, certFile)
  copyFileSync(first.keyFile, keyFile)
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    [
      'models:',
      `  - id: ${MODEL}`,
      '    display_name: TLS chat model',
      '    task_type: chat',
      '    vram_gb: 4',
      '    serving_profiles:',
      '      - runtime: openai',
      `        runtime_model_id: ${RUNTIME_MODEL}`,
    ].join('\n'),
  )
  server = await startTestServer({
    CATALOGUE_PATH: manifest,
    LOG_LEVEL: 'info',
    TLS_CERT_FILE: certFile,
    TLS_KEY_FILE: keyFile,
    TLS_CHECK_SECONDS: '1',
    RATE_LIMIT_KEYS_PER_MINUTE: '0',
  })
  const t = target()
  const user = await makeUser(t)
  apiKey = (await makePersonalKey(t, user)).key
  const workerKey = (await makeWorkerKey(t, user, user.personalOrgId)).key
  rememberSecret(workerKey)
  rt = startFakeRuntime({ models: [RUNTIME_MODEL] })
  // The daemon as a lab runs it: its own process, given the lab's CA and nothing else.
  daemon = spawnWorker(
    [
      '--server',
      server.url,
      '--ca-file',
      ca.rootFile,
      '--runtime',
      'openai',
      '--runtime-url',
      rt.url,
      '--vram-gb',
      '8',
      '--state-dir',
      join(dir, 'worker-state'),
      '--poll-interval',
      '0.05',
      '--progress-interval',
      '0.1',
    ],
    { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, GRIDKEEP_WORKER_KEY: workerKey },
    { outputDir: dir },
  )
})

afterAll(async () => {
  daemon?.proc.kill('SIGTERM')
  await daemon?.exited()
  await rt?.stop()
  await server?.stop()
  rmSync(dir, { recursive: true, force: true })
})

/** `gridkeep <args>` from source, as its own process with exactly `env` (plus PATH). */
async function client(args: string[], env: Record<string, string>) {
  const proc = ownProcess(
    Bun.spawn([process.execPath, join(REPO, 'src/cli.ts'), ...args], {
      cwd: dir,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: dir,
        XDG_CONFIG_HOME: join(dir, 'config'),
        ...env,
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

describe('HTTPS on the binary', () => {
  test('the server answers over HTTPS with the chain, and every answer carries Strict-Transport-Security', async () => {
    expect(server.url).toStartWith('https://127.0.0.1:')
    expect(server.config.PUBLIC_URL).toStartWith('https://')
    const res = await fetch(`${server.url}/healthz`, { tls: { ca: rootPem } })
    expect(res.status).toBe(200)
    expect(res.headers.get('strict-transport-security')).toBe(HSTS)
    // An error answer too.
    const missing = await fetch(`${server.url}/v1/batches/nope`, { tls: { ca: rootPem } })
    expect(missing.status).toBe(401)
    expect(missing.headers.get('strict-transport-security')).toBe(HSTS)
    // Without the lab's CA the certificate is not trusted.
    expect(await fetch(`${server.url}/healthz`).catch((e) => e.code)).toBe(
      'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
    )
  })

  test('the daemon (with --ca-file) runs a batch the terminal client (with GRIDKEEP_CA_FILE) submits and waits for', async () => {
    const input = join(dir, 'client.jsonl')
    writeFileSync(input, `${chatLines(5, MODEL).join('\n')}\n`)
    const out = join(dir, 'client-out.jsonl')
    const env = { GRIDKEEP_SERVER: server.url, GRIDKEEP_API_KEY: apiKey, GRIDKEEP_CA_FILE: ca.rootFile }
    const ran = await client(['submit', input, '--wait', '-o', out, '--interval', '0.1'], env)
    expect(ran.stderr).not.toContain('clear text')
    expect(ran.code).toBe(0)
    expect(readFileSync(out, 'utf8').trim().split('\n')).toHaveLength(5)
    // The flag does what the variable does; without either, the client cannot trust the server.
    const flagged = await client(['batches', '--ca-file', ca.rootFile], {
      GRIDKEEP_SERVER: server.url,
      GRIDKEEP_API_KEY: apiKey,
    })
    expect(flagged.code).toBe(0)
    expect(JSON.parse(flagged.stdout.split('\n')[0]!).object).toBe('batch')
    const untrusted = await client(['batches'], { GRIDKEEP_SERVER: server.url, GRIDKEEP_API_KEY: apiKey })
    expect(untrusted.code).toBe(5)
    expect(untrusted.stderr).toContain(`cannot reach ${server.url}`)
    const unreadable = await client(['batches', '--ca-file', join(dir, 'no-such-ca.pem')], env)
    expect(unreadable.code).toBe(2)
    expect(unreadable.stderr).toContain(`--ca-file: cannot read ${join(dir, 'no-such-ca.pem')} (ENOENT)`)
  })

  test('the official openai SDK (NODE_EXTRA_CA_CERTS) completes a batch', async () => {
    const proc = ownProcess(
      Bun.spawn([process.execPath, join(REPO, 'test/helpers/openai-batch.ts'), MODEL, '3'], {
        cwd: REPO,
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          HOME: dir,
          NODE_EXTRA_CA_CERTS: ca.rootFile,
          OPENAI_BASE_URL: `${server.url}/v1`,
          OPENAI_API_KEY: apiKey,
        },
        stdout: 'pipe',
        stderr: 'pipe',
      }),
    )
    const [stdout, stderr, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ])
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' })
    expect(JSON.parse(stdout)).toEqual({ status: 'completed', completed: 3, failed: 0, output_lines: 3 })
    // The daemon said nothing about clear text: its server is https://.
    expect(daemon.output()).not.toContain('clear text')
  })

  test('a renewed certificate is served to the next connection, while an upload begun before finishes on the old one; a pair that does not match yet is not', async () => {
    expect(await servedFingerprint(server.port, rootPem)).toBe(first.fingerprint)
    // An upload under way across the swap: its connection made on the first certificate, its
    // handler running (it has asked the blob store for the file), half of its body sent.
    const began = Promise.withResolvers<void>()
    const create = spyOn(server.deps.blobs, 'create')
    create.mockImplementation((id) => {
      began.resolve()
      create.mockRestore()
      return server.deps.blobs.create(id)
    })
    const upload = heldUpload(server.port, chatLines(3, MODEL).join('\n') + '\n')
    expect(await upload.fingerprint).toBe(first.fingerprint)
    await began.promise
    const renewed = ca.issue('renewed')
    // Half a renewal: the new certificate, the old key. Refused, and the old pair stays served.
    const refusedBefore = refusals().length
    copyFileSync(renewed.certFile, certFile)
    await until('the half-written pair refused', () => refusals().length > refusedBefore)
    expect(refusals().at(-1)).toContain(
      `TLS_KEY_FILE: ${keyFile} is not the key of the certificate in ${certFile}`,
    )
    expect(await servedFingerprint(server.port, rootPem)).toBe(first.fingerprint)
    // The key follows: the next connection gets the new certificate, on the same port.
    copyFileSync(renewed.keyFile, keyFile)
    await until(
      'the new certificate served',
      async () => (await servedFingerprint(server.port, rootPem)) === renewed.fingerprint,
    )
    // The upload's connection outlived its listener: the rest of the body goes, and the answer is
    // the file, stored whole.
    const answer = await upload.finish()
    expect(answer.status).toBe(200)
    expect(answer.body).toMatchObject({
      object: 'file',
      filename: 'across-the-swap.jsonl',
      bytes: answer.sent,
    })
    const stored = await target().req('GET', `/v1/files/${answer.body.id}/content`, { token: apiKey })
    expect(stored.status).toBe(200)
    expect(stored.text).toBe(chatLines(3, MODEL).join('\n') + '\n')
    const res = await fetch(`${server.url}/healthz`, { tls: { ca: rootPem } })
    expect(res.status).toBe(200)
    // Everyone carries on: a batch runs end to end after the swap.
    const input = join(dir, 'after.jsonl')
    writeFileSync(input, `${chatLines(2, MODEL).join('\n')}\n`)
    const ran = await client(
      ['submit', input, '--wait', '-o', join(dir, 'after-out.jsonl'), '--interval', '0.1'],
      {
        GRIDKEEP_SERVER: server.url,
        GRIDKEEP_API_KEY: apiKey,
        GRIDKEEP_CA_FILE: ca.rootFile,
      },
    )
    expect(ran.code).toBe(0)
  })
})

describe('a renewal that cannot listen again', () => {
  // Bun cannot swap a listener's certificate, so a renewal stops the listener and listens again on
  // its port; if something took the port in that instant, the server retries at growing intervals,
  // gives up after the last, and never listens again once it is stopped. Bun.serve is made to
  // refuse as a taken port would, from the renewal on.
  const refuseToListen = () =>
    spyOn(Bun, 'serve').mockImplementation(() => {
      throw Object.assign(new Error('Failed to start server. Is port in use?'), { code: 'EADDRINUSE' })
    })

  /** A TLS server of its own on `name`'s files, and the renewal of those files. */
  async function renewing(name: string, relistenDelaysMs: number[]) {
    const files = { cert: join(dir, `${name}-fullchain.pem`), key: join(dir, `${name}-privkey.pem`) }
    const before = ca.issue(`${name}-before`)
    copyFileSync(before.certFile, files.cert)
    copyFileSync(before.keyFile, files.key)
    const s = await startTestServer(
      { TLS_CERT_FILE: files.cert, TLS_KEY_FILE: files.key, TLS_CHECK_SECONDS: '1', LOG_LEVEL: 'info' },
      { relistenDelaysMs },
    )
    const renew = () => {
      const after = ca.issue(`${name}-after`)
      copyFileSync(after.keyFile, files.key)
      copyFileSync(after.certFile, files.cert)
    }
    return { s, renew }
  }

  /** The server's "not listening" lines for `port`, in order. */
  const notListening = (port: number) =>
    capturedLogLines()
      .filter((l) => l.includes('not listening: cannot listen again after the certificate renewal'))
      .map((l) => JSON.parse(l))
      .filter((r) => r.port === port)

  test('the shutdown cancels the waiting retry: nothing listens after stop()', async () => {
    const { s, renew } = await renewing('cancel', [300, 600])
    const serve = refuseToListen()
    try {
      renew()
      // Back-off: the first attempt failed at once and the next waits, growing.
      await until('a retry waiting', () => notListening(s.port).length >= 1)
      expect(notListening(s.port)[0]).toMatchObject({
        level: 'error',
        attempt: 1,
        attempts: 3,
        retry_in_ms: 300,
      })
      // The port is closed meanwhile: the log says so, and so does a connection.
      expect(await fetch(`${s.url}/healthz`, { tls: { ca: rootPem } }).catch((e) => e.code)).toBe(
        'ECONNREFUSED',
      )
      const waiting = notListening(s.port).at(-1)
      const attempts = serve.mock.calls.length
      expect((await s.stop()).drained).toBe(true)
      // A timer set now, as long as the retry's wait, fires after it would have (timers of equal
      // delay fire in the order they were set): by then, no attempt was made and nothing listens.
      await new Promise((resolve) => setTimeout(resolve, waiting.retry_in_ms))
      expect(serve.mock.calls.length).toBe(attempts)
      expect(notListening(s.port)).toHaveLength(attempts)
    } finally {
      serve.mockRestore()
      await s.stop()
    }
  })

  test('the retries are bounded: after the last the server says it gave up and asks to be stopped', async () => {
    const { s, renew } = await renewing('give-up', [20, 40])
    const serve = refuseToListen()
    try {
      renew()
      expect(await s.failed).toBe(`cannot listen on port ${s.port} again after the certificate renewal`)
      expect(serve.mock.calls.length).toBe(3)
      expect(
        notListening(s.port).map((r) => [r.msg.split('; ')[1], r.attempt, r.retry_in_ms ?? null]),
      ).toEqual([
        ['retrying', 1, 20],
        ['retrying', 2, 40],
        ['giving up, stopping', 3, null],
      ])
    } finally {
      serve.mockRestore()
      await s.stop()
    }
  })
})

/**
 * POST /v1/files over a connection of its own, by hand: the head and the first half of the body
 * are sent at once, the rest when finish() is called. `fingerprint` is the certificate that
 * connection was served.
 */
function heldUpload(port: number, content: string) {
  const boundary = 'gk-held-upload'
  const form = [
    `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`,
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="across-the-swap.jsonl"\r\n`,
    `Content-Type: application/jsonl\r\n\r\n${content}\r\n--${boundary}--\r\n`,
  ].join('')
  const body = Buffer.from(form)
  const half = body.length >> 1
  const socket = connect({ host: '127.0.0.1', port, servername: 'localhost', ca: rootPem })
  const received: Buffer[] = []
  socket.on('data', (chunk: Buffer) => received.push(chunk))
  const ended = new Promise<void>((resolve, reject) => {
    socket.on('end', resolve)
    socket.on('close', () => resolve())
    socket.on('error', reject)
  })
  const fingerprint = new Promise<string>((resolve, reject) => {
    socket.once('secureConnect', () => {
      socket.write(
        [
          'POST /v1/files HTTP/1.1',
          'Host: localhost',
          `Authorization: Bearer ${apiKey}`,
          `Content-Type: multipart/form-data; boundary=${boundary}`,
          `Content-Length: ${body.length}`,
          'Connection: close',
          '',
          '',
        ].join('\r\n'),
      )
      socket.write(body.subarray(0, half))
      resolve(socket.getPeerCertificate().fingerprint256)
    })
    socket.once('error', reject)
  })
  return {
    fingerprint,
    async finish() {
      socket.write(body.subarray(half))
      await ended
      const text = Buffer.concat(received).toString('utf8')
      const [head = '', payload = ''] = text.split('\r\n\r\n')
      return {
        status: Number(head.split(' ')[1]),
        body: JSON.parse(payload),
        sent: Buffer.byteLength(content),
      }
    },
  }
}

const refusals = () =>
  capturedLogLines()
    .filter((l) => l.includes('TLS files changed but cannot be served yet'))
    .map((l) => JSON.parse(l).why as string)

describe('TLS settings refused at start', () => {
  test('a certificate without its key, or a key without its certificate: one line, before anything starts', () => {
    expect(() => loadConfig({ TLS_CERT_FILE: certFile })).toThrow(
      new ConfigError('invalid configuration: TLS_KEY_FILE: required with TLS_CERT_FILE (both or neither)'),
    )
    expect(() => loadConfig({ TLS_KEY_FILE: keyFile })).toThrow(
      new ConfigError('invalid configuration: TLS_CERT_FILE: required with TLS_KEY_FILE (both or neither)'),
    )
  })

  test('an unreadable file, or a key that is not the certificate’s, stops the start naming the variable', async () => {
    const other = ca.issue('other')
    // Nothing is opened before the check (no deps given: the server would make its own after it).
    const start = (env: Record<string, string>) =>
      startServer(testConfig(env)).then(
        async (s) => {
          await s.stop()
          return 'started'
        },
        (e) => `${e.constructor.name}: ${e.message}`,
      )
    expect(await start({ TLS_CERT_FILE: join(dir, 'missing.pem'), TLS_KEY_FILE: other.keyFile })).toBe(
      `ConfigError: TLS_CERT_FILE: cannot read ${join(dir, 'missing.pem')} (ENOENT)`,
    )
    expect(await start({ TLS_CERT_FILE: other.certFile, TLS_KEY_FILE: first.keyFile })).toBe(
      `ConfigError: TLS_KEY_FILE: ${first.keyFile} is not the key of the certificate in ${other.certFile}`,
    )
    expect(await start({ TLS_CERT_FILE: other.keyFile, TLS_KEY_FILE: other.keyFile })).toStartWith(
      `ConfigError: TLS_CERT_FILE: ${other.keyFile} holds no PEM certificate`,
    )
  })

  test('without TLS settings the server speaks plain HTTP and sends no Strict-Transport-Security', async () => {
    const config = testConfig()
    expect(config.PUBLIC_URL).toStartWith('http://')
    const plain = await startTestServer()
    try {
      expect(plain.url).toStartWith('http://')
      const res = await fetch(`${plain.url}/healthz`)
      expect(res.status).toBe(200)
      expect(res.headers.has('strict-transport-security')).toBe(false)
    } finally {
      await plain.stop()
    }
  })
})
