import { afterAll, expect, test } from 'bun:test'
import { startTestServer, type TestServer } from '../helpers/app'
import { readBlob } from '../helpers/blobs'
import {
  batchRow,
  heartbeatBody,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  registerBody,
  uploadForm,
} from '../helpers/workers'

// A batch driven from `validated` to `completed` by simulated daemons over a real server: one
// worker fails its run, another runs it (reading the input, reporting progress, uploading output),
// and the owner reads the output back.

let s: TestServer
afterAll(() => s.stop())

test('validated → in_progress → (failure, requeue) → in_progress → completed; the owner reads the output', async () => {
  s = await startTestServer()
  const f = await makeFleet(s)
  const entry = await makeCatalogEntry(s.deps, {
    runtime_model_id: 'e2e:8b',
    profiles: [{ runtime: 'ollama', runtime_model_id: 'e2e:8b', params: { num_ctx: 4096 } }],
  })
  const batch = await makeValidatedBatch(s.deps, {
    userId: f.user.id,
    model: entry.id,
    customIds: ['a', 'b', 'c', 'd', 'e'],
  })
  const call = async (path: string, body: unknown) => {
    const res = await s.req('POST', path, { token: f.key, body })
    expect(res.status).toBe(200)
    return res.body
  }

  async function daemon(name: string) {
    const { worker_id } = await call(
      '/workers/register',
      registerBody({ name, machine_id: name, models: ['e2e:8b'] }),
    )
    await call(`/workers/${worker_id}/heartbeat`, heartbeatBody())
    return worker_id as string
  }

  const flaky = await daemon('flaky')
  const first = (await call('/workers/poll', { worker_id: flaky })).job
  expect(first).toMatchObject({
    job_id: batch.id,
    model: 'e2e:8b',
    params: { num_ctx: 4096 },
    total_requests: 5,
  })
  expect((await batchRow(s.deps, batch.id)).status).toBe('in_progress')
  const failed = await call('/workers/report-failure', {
    worker_id: flaky,
    job_id: batch.id,
    assignment_id: first.assignment_id,
    error: 'CUDA out of memory',
  })
  expect(failed).toEqual({
    status: 'validated',
    batch_id: batch.id,
    attempts: 1,
    error: 'CUDA out of memory',
  })

  const good = await daemon('good')
  const job = (await call('/workers/poll', { worker_id: good })).job
  expect(job.job_id).toBe(batch.id)
  // The daemon fetches its input (via GET /v1/files/{id}/content once the files workstream lands).
  const viaRoute = await s.req('GET', job.input_path, { token: f.key })
  const input = viaRoute.status === 200 ? viaRoute.text : (await readBlob(s.deps, job.input_file_id))!
  const requests = input
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { custom_id: string; body: { model: string } })
  expect(requests.map((r) => r.custom_id)).toEqual(['a', 'b', 'c', 'd', 'e'])

  const lines: string[] = []
  for (const [i, r] of requests.entries()) {
    const ok = r.custom_id !== 'd'
    lines.push(
      JSON.stringify({
        id: `batch_req_${i}`,
        custom_id: r.custom_id,
        response: {
          status_code: ok ? 200 : 400,
          request_id: `req_${i}`,
          body: ok
            ? {
                object: 'chat.completion',
                model: job.model,
                choices: [],
                usage: { prompt_tokens: 10, completion_tokens: i, total_tokens: 10 + i },
              }
            : { error: { message: 'context too long' } },
        },
        error: null,
      }),
    )
    await call('/workers/progress', {
      worker_id: good,
      job_id: job.job_id,
      assignment_id: job.assignment_id,
      total_prompts: 5,
      completed_prompts: lines.length - (i >= 3 ? 1 : 0),
      failed_prompts: i >= 3 ? 1 : 0,
    })
  }
  expect(await batchRow(s.deps, batch.id)).toMatchObject({
    request_counts_completed: 4,
    request_counts_failed: 1,
  })

  s.clock.advance(42)
  const form = uploadForm(
    { job_id: job.job_id, worker_id: good, assignment_id: job.assignment_id, completed: 4, failed: 1 },
    lines.join('\n') + '\n',
  )
  const done = await s.req('POST', '/workers/upload-results', { token: f.key, raw: form })
  expect(done.status).toBe(200)
  expect(done.body).toMatchObject({
    batch_id: batch.id,
    status: 'completed',
    request_counts: { total: 5, completed: 4, failed: 1 },
    usage: { prompt_tokens: 40, completion_tokens: 0 + 1 + 2 + 4, total_tokens: 47 },
  })
  expect(await batchRow(s.deps, batch.id)).toMatchObject({
    status: 'completed',
    attempts: 1,
    completed_at: s.clock.now(),
  })

  // The owner reads the output back (through the files route when it exists in this build).
  const outRow = (await s.deps.store.files.get(done.body.output_file_id, null, s.deps.clock.now()))!
  expect(outRow).toMatchObject({ user_id: f.user.id, purpose: 'batch_output', batch_id: batch.id })
  const expected = lines.filter((l) => JSON.parse(l).custom_id !== 'd').join('\n') + '\n'
  const read = await s.req('GET', `/v1/files/${done.body.output_file_id}/content`, { token: f.user.token })
  if (read.status === 404 && read.body?.error?.code === 'route_not_found') {
    expect(await readBlob(s.deps, outRow.id)).toBe(expected)
  } else {
    expect(read.status).toBe(200)
    expect(read.text).toBe(expected)
  }
  expect(outRow.bytes).toBe(Buffer.byteLength(expected))
  const errRow = (await s.deps.store.files.get(done.body.error_file_id, null, s.deps.clock.now()))!
  expect(errRow).toMatchObject({
    user_id: f.user.id,
    purpose: 'batch_output',
    filename: `${batch.id}_error.jsonl`,
  })
  expect(JSON.parse((await readBlob(s.deps, errRow.id))!).custom_id).toBe('d')
})
