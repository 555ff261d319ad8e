import { afterAll, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { getBatch, jsonl, makeBatch, validateAll } from '../helpers/batches'
import { makeUser, makeWorkerKey } from '../helpers/builders'
import {
  batchRow,
  heartbeat,
  makeCatalogEntry,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// A /v1/responses batch's usage (docs/api.md §7 upload-results `usage`, §14): the engines' Responses
// usage (input_tokens, output_tokens) is summed under its own names and as prompt and completion
// tokens, its input_tokens_details.cached_tokens as cached_tokens, which the usage views report —
// through the real flow, on the suite's storage engine.

const t = makeTestApp()
afterAll(() => t.close())

/** An output line as a daemon writes it for a /v1/responses request (llama-server's usage shape). */
const responseLine = (customId: string, input: number, output: number, cached: number) => {
  const line = JSON.parse(okLine(customId))
  line.response.body = {
    id: `resp_${customId}`,
    object: 'response',
    status: 'completed',
    model: 'resp:7b',
    output: [
      {
        type: 'message',
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text: 'hello', annotations: [] }],
      },
    ],
    usage: {
      input_tokens: input,
      input_tokens_details: { cached_tokens: cached },
      output_tokens: output,
      total_tokens: input + output,
    },
  }
  return JSON.stringify(line)
}

test('a /v1/responses batch: its usage carries both names, and the usage views count its tokens', async () => {
  const user = await makeUser(t)
  const entry = await makeCatalogEntry(t.deps, { id: 'resp-8b-q4km', runtime_model_id: 'resp:7b' })
  const { key } = await makeWorkerKey(t, user, user.personalOrgId)
  const workerId = await registerWorker(t, key, { models: ['resp:7b'] })
  const lines = ['a', 'b', 'c'].map((id) =>
    JSON.stringify({
      custom_id: id,
      method: 'POST',
      url: '/v1/responses',
      body: { model: entry.id, input: id },
    }),
  )
  const batch = await makeBatch(t, user, jsonl(lines), { endpoint: '/v1/responses' })
  await validateAll(t)
  expect((await getBatch(t, user, batch.id)).status).toBe('validated')
  expect((await heartbeat(t, key, workerId)).status).toBe(200)
  const job = (await poll(t, key, workerId))!
  expect(job).toMatchObject({ job_id: batch.id, endpoint: '/v1/responses', model: 'resp:7b' })
  t.clock.advance(60)
  const res = await upload(
    t,
    key,
    { worker_id: workerId, job_id: batch.id, assignment_id: job.assignment_id, completed: 3, failed: 0 },
    jsonl([responseLine('a', 75, 6, 0), responseLine('b', 96, 4, 64), responseLine('c', 56, 5, 48)]),
  )
  expect(res.status).toBe(200)
  const usage = {
    input_tokens: 227,
    output_tokens: 15,
    total_tokens: 242,
    prompt_tokens: 227,
    completion_tokens: 15,
    cached_tokens: 112,
  }
  expect(res.body.usage).toEqual(usage)
  expect((await batchRow(t.deps, batch.id)).usage).toEqual(usage)

  // docs/api.md §6: the batch object's usage, OpenAI's shape (input tokens, of them cached ones).
  expect((await getBatch(t, user, batch.id)).usage).toEqual({
    input_tokens: 227,
    input_tokens_details: { cached_tokens: 112 },
    output_tokens: 15,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 242,
  })
  const tokens = {
    batches: 1,
    requests: 3,
    prompt_tokens: 227,
    cached_tokens: 112,
    completion_tokens: 15,
    total_tokens: 242,
  }
  const mine = await t.req('GET', '/v1/usage?group_by=model', { token: user.token })
  expect(mine.status).toBe(200)
  expect(mine.body.data).toEqual([expect.objectContaining({ model: entry.id, ...tokens })])
  const org = await t.req('GET', `/v1/orgs/${user.personalOrgId}/usage?group_by=model`, { token: user.token })
  expect(org.status).toBe(200)
  expect(org.body.data).toEqual([expect.objectContaining({ model: entry.id, ...tokens })])
})
