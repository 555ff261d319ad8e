import { afterAll, beforeAll, expect, test } from 'bun:test'
import OpenAI from 'openai'
import { startTestServer, type TestServer } from '../helpers/app'
import { makePersonalKey, makeUser } from '../helpers/builders'

// The official SDK lists and retrieves models with a personal key (docs/api.md: OpenAI compatibility).
// startServer seeds the shipped catalogue/models.yaml before it listens.

let s: TestServer
beforeAll(async () => {
  s = await startTestServer()
})
afterAll(() => s.stop())

test('openai.models.list() and .retrieve() against the seeded catalogue', async () => {
  const u = await makeUser(s)
  const { key } = await makePersonalKey(s, u)
  const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: key })
  const ids: string[] = []
  for await (const m of client.models.list()) ids.push(m.id)
  expect(ids).toContain('llama-3-1-8b-instruct-q4km')
  expect(ids).toContain('nomic-embed-text-v1-5-f16')
  const one = await client.models.retrieve('llava-1-6-mistral-7b-q40')
  expect(one).toMatchObject({
    id: 'llava-1-6-mistral-7b-q40',
    object: 'model',
    owned_by: 'gridkeep',
    task_type: 'vision',
  })
  const missing = await client.models.retrieve('no-such-model').then(
    () => null,
    (e: unknown) => e,
  )
  expect(missing).toBeInstanceOf(OpenAI.NotFoundError)
})
