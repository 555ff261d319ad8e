import { afterAll, expect, test } from 'bun:test'
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildRequest, readRes } from '../helpers/app'
import { jsonl, line, uploadForm } from '../helpers/batches'
import {
  baseEnv,
  PROCESS_TEST_TIMEOUT,
  type ServerProcess,
  startServerProcess,
  tempDir,
} from '../helpers/ops'
import { freshPostgresUrl, testEngine } from '../helpers/postgres'
import { startReceiver, verify } from '../helpers/receiver'

// docs/api.md §13 "at least once, from a persisted outbox that survives restarts": a real server
// process is SIGKILLed while its delivery is in flight (the receiver holds the request); the
// restarted server delivers the same event (same webhook-id) once the dead one's lease lapses.

const MODEL = 'hook-8b-q4km'
const dir = tempDir('webhook-sigkill')
const procs: ServerProcess[] = []
const receiver = startReceiver()
afterAll(() => {
  for (const p of procs) p.proc.kill(9)
  receiver.stop()
  rmSync(dir, { recursive: true, force: true })
})

const req = async (
  url: string,
  method: string,
  path: string,
  opts: Parameters<typeof buildRequest>[3] = {},
) => readRes(await fetch(buildRequest(url, method, path, opts)))

test(
  'a delivery cut off by SIGKILL is made again after the restart',
  async () => {
    const catalogue = join(dir, 'models.yaml')
    writeFileSync(
      catalogue,
      `models:\n  - id: ${MODEL}\n    task_type: chat\n    quantization: Q4_K_M\n    runtime: ollama\n    runtime_model_id: hook:rt\n`,
    )
    const env = baseEnv(join(dir, 'data'), {
      CATALOGUE_PATH: catalogue,
      WEBHOOK_ALLOW_PRIVATE: 'true',
      // The dead server's lease (2 × timeout + 1 s) lapses 3 s after it was taken.
      WEBHOOK_TIMEOUT_SECONDS: '1',
      ...(testEngine === 'postgres'
        ? { DATABASE_URL: await freshPostgresUrl(), JWT_SECRET: 's'.repeat(40) }
        : {}),
    })
    // The first delivery never gets an answer: the server dies with it in flight.
    receiver.answerWith(() => new Promise<Response>(() => {}))
    const first = await startServerProcess(env)
    procs.push(first)

    const email = 'hooks@example.test'
    const password = 'hooks-password-1'
    expect(
      (await req(first.url, 'POST', '/v1/auth/signup', { body: { email, password, full_name: 'H' } })).status,
    ).toBe(200)
    const token = (await req(first.url, 'POST', '/v1/auth/login', { body: { email, password } })).body
      .access_token
    const hook = await req(first.url, 'POST', '/v1/webhooks', {
      token,
      body: { url: `${receiver.url}/hook`, events: ['batch.validated'] },
    })
    expect(hook.status).toBe(200)
    const upload = await req(first.url, 'POST', '/v1/files', {
      token,
      raw: uploadForm(jsonl([line('only', MODEL)]), 'in.jsonl', 'batch'),
    })
    const batch = await req(first.url, 'POST', '/v1/batches', {
      token,
      body: { input_file_id: upload.body.id },
    })
    expect(batch.status).toBe(200)

    await receiver.waitFor(1)
    first.proc.kill(9)
    expect(await first.exited).not.toBe(0)
    const cut = receiver.received[0]!
    expect(verify(hook.body.secret, cut)).toEqual({
      id: cut.headers['webhook-id']!,
      type: 'batch.validated',
      created_at: expect.any(Number),
      data: { id: batch.body.id },
    })

    receiver.answerWith(() => new Response(null, { status: 200 }))
    const second = await startServerProcess(env)
    procs.push(second)
    await receiver.waitFor(2)
    const again = receiver.received[1]!
    expect(again.headers['webhook-id']).toBe(cut.headers['webhook-id']!)
    expect(verify(hook.body.secret, again).data).toEqual({ id: batch.body.id })
    // Recorded as delivered by the second server; the first one's attempt left no record.
    let log = await req(second.url, 'GET', `/v1/webhooks/${hook.body.id}/deliveries`, { token })
    for (let i = 0; i < 100 && log.body.data.length === 0; i++) {
      await Bun.sleep(50)
      log = await req(second.url, 'GET', `/v1/webhooks/${hook.body.id}/deliveries`, { token })
    }
    expect(
      log.body.data.map((d: { outcome: string; status_code: number }) => [d.outcome, d.status_code]),
    ).toEqual([['delivered', 200]])
    // The secret signed both requests and reached neither server's log.
    for (const p of [first, second]) expect(p.output()).not.toContain(hook.body.secret.slice(6))
  },
  PROCESS_TEST_TIMEOUT,
)
