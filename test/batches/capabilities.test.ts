import { afterAll, describe, expect, test } from 'bun:test'
import { applyManifest } from '../../src/modules/catalogue/seed'
import { makeTestApp } from '../helpers/app'
import { getBatch, jsonl, makeBatch, makeCatalogEntry, validateAll } from '../helpers/batches'
import { type MadeUser, makeUser } from '../helpers/builders'

// docs/api.md §6 `unsupported_capability` and the batch's `needs`; docs/api.md §4 model capabilities.
// A line asking for what its model cannot do fails validation once, with its line and field,
// instead of failing line by line on a GPU.

const t = makeTestApp()
afterAll(() => t.close())

const plain = await makeCatalogEntry(t, { id: 'plain-8b-q4km', capabilities: {} })
const able = await makeCatalogEntry(t, {
  id: 'able-8b-q4km',
  capabilities: { json_mode: true, vision: true, logprobs: true },
})

let user: MadeUser
const owner = async () => {
  user ??= await makeUser(t)
  return user
}

type Err = { code: string; line: number | null; field: string | null; message: string }

async function validated(lines: string[], endpoint = '/v1/chat/completions') {
  const u = await owner()
  const batch = await makeBatch(t, u, jsonl(lines), { endpoint })
  await validateAll(t)
  return getBatch(t, u, batch.id)
}

const codes = (b: { errors: { data: Err[] } }) => b.errors.data.map((e) => [e.code, e.line, e.field])

/** A chat line whose body has `extra` beside model and messages. */
const chatLine = (id: string, model: string, extra: Record<string, unknown> = {}, messages?: unknown[]) =>
  JSON.stringify({
    custom_id: id,
    body: { model, messages: messages ?? [{ role: 'user', content: 'hi' }], ...extra },
  })

const image = { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }
const withImage = [
  { role: 'system', content: 'describe' },
  { role: 'user', content: [{ type: 'text', text: 'what is this?' }, image] },
]

describe('unsupported_capability', () => {
  test('each capability the model lacks: its code, line and field; the rest of the file still read', async () => {
    const M = plain.id
    const b = await validated([
      chatLine('a', M), // 1: nothing asked
      chatLine('b', M, { response_format: { type: 'json_object' } }), // 2
      chatLine('c', M, { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {} } } }), // 3
      chatLine('d', M, {}, withImage), // 4
      chatLine('e', M, { logprobs: true, top_logprobs: 2 }), // 5
      chatLine('f', M, { top_logprobs: 1 }), // 6
      chatLine('g', M, { logprobs: false, response_format: { type: 'text' } }), // 7: nothing asked
      chatLine('h', M, { response_format: { type: 'json_object' }, logprobs: true }, withImage), // 8
    ])
    expect(b.status).toBe('failed')
    expect(codes(b)).toEqual([
      ['unsupported_capability', 2, 'body.response_format'],
      ['unsupported_capability', 3, 'body.response_format'],
      ['unsupported_capability', 4, 'body.messages[1].content[1]'],
      ['unsupported_capability', 5, 'body.logprobs'],
      ['unsupported_capability', 6, 'body.top_logprobs'],
      ['unsupported_capability', 8, 'body.response_format'],
      ['unsupported_capability', 8, 'body.messages[1].content[1]'],
      ['unsupported_capability', 8, 'body.logprobs'],
    ])
    const messages = b.errors.data.map((e: Err) => e.message)
    expect(messages[0]).toBe(`Model "${M}" does not support json_mode, which body.response_format asks for`)
    expect(messages[2]).toContain('vision')
    expect(messages[3]).toContain('logprobs')
    expect(b.needs).toEqual([])
  })

  test('comes after the table’s other checks of the line, and only for a model in the catalogue', async () => {
    const b = await validated([
      chatLine('a', plain.id),
      chatLine('a', plain.id, { logprobs: true }),
      chatLine('c', 'no-such-model', { logprobs: true }),
    ])
    expect(codes(b)).toEqual([
      ['duplicate_custom_id', 2, 'custom_id'],
      ['unsupported_capability', 2, 'body.logprobs'],
      ['unsupported_model', 3, 'body.model'],
      ['model_mismatch', 3, 'body.model'],
    ])
  })

  test('a model that has them validates, and the batch records what it needs', async () => {
    const b = await validated([
      chatLine('a', able.id),
      chatLine('b', able.id, { logprobs: true }),
      chatLine('c', able.id, { response_format: { type: 'json_object' } }),
    ])
    expect(b.status).toBe('validated')
    expect(b.errors.total).toBe(0)
    expect(b.needs).toEqual(['json_mode', 'logprobs'])
    const vision = await validated([chatLine('a', able.id, {}, withImage)])
    expect(vision).toMatchObject({ status: 'validated', needs: ['vision'] })
    const nothing = await validated([chatLine('a', plain.id), chatLine('b', plain.id, { logprobs: null })])
    expect(nothing).toMatchObject({ status: 'validated', needs: [] })
  })

  test('/v1/completions: logprobs as a number of tokens asks for logprobs', async () => {
    const line = (model: string) =>
      JSON.stringify({ custom_id: 'a', body: { model, prompt: 'Once', logprobs: 3 } })
    expect(codes(await validated([line(plain.id)], '/v1/completions'))).toEqual([
      ['unsupported_capability', 1, 'body.logprobs'],
    ])
    expect(await validated([line(able.id)], '/v1/completions')).toMatchObject({
      status: 'validated',
      needs: ['logprobs'],
    })
  })

  test('/v1/embeddings needs embeddings, which an embedding entry has whatever its capabilities say', async () => {
    const embed = await makeCatalogEntry(t, { id: 'embed-old-f16', task_type: 'embedding', capabilities: {} })
    const b = await validated(
      [JSON.stringify({ custom_id: 'a', url: '/v1/embeddings', body: { model: embed.id, input: 'x' } })],
      '/v1/embeddings',
    )
    expect(b).toMatchObject({ status: 'validated', needs: ['embeddings'] })
    // A chat model there is the endpoint's error alone, not also a capability's.
    const chat = await validated(
      [JSON.stringify({ custom_id: 'a', body: { model: plain.id, input: 'x' } })],
      '/v1/embeddings',
    )
    expect(codes(chat)).toEqual([['unsupported_endpoint', 1, 'body.model']])
  })

  test('/v1/responses: text.format, input_image parts, top_logprobs and the logprobs include', async () => {
    const resp = (id: string, model: string, extra: Record<string, unknown>) =>
      JSON.stringify({ custom_id: id, url: '/v1/responses', body: { model, input: 'hi', ...extra } })
    const looking = [
      { role: 'user', content: 'plain' },
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'what is this?' },
          { type: 'input_image', image_url: 'data:image/png;base64,AAAA' },
        ],
      },
    ]
    const asks = (model: string) => [
      resp('a', model, { text: { format: { type: 'json_object' } } }),
      resp('b', model, { input: looking }),
      resp('c', model, { top_logprobs: 3 }),
      resp('d', model, { include: ['message.output_text.logprobs'] }),
      resp('e', model, { text: { format: { type: 'text' } }, include: [] }),
    ]
    const refused = await validated(asks(plain.id), '/v1/responses')
    expect(codes(refused)).toEqual([
      ['unsupported_capability', 1, 'body.text.format'],
      ['unsupported_capability', 2, 'body.input[1].content[1]'],
      ['unsupported_capability', 3, 'body.top_logprobs'],
      ['unsupported_capability', 4, 'body.include'],
    ])
    expect(await validated(asks(able.id), '/v1/responses')).toMatchObject({
      status: 'validated',
      needs: ['json_mode', 'vision', 'logprobs'],
    })
  })

  test('a vision entry can see whatever its capabilities say', async () => {
    const see = await makeCatalogEntry(t, { id: 'see-7b-q40', task_type: 'vision', capabilities: {} })
    expect(await validated([chatLine('a', see.id, {}, withImage)])).toMatchObject({
      status: 'validated',
      needs: ['vision'],
    })
  })
})

describe('the shipped catalogue', () => {
  const shipped = makeTestApp()
  afterAll(() => shipped.close())

  test('catalogue/models.yaml serves JSON, images, log probabilities and embeddings where its entries say so', async () => {
    const report = await applyManifest(
      shipped.deps,
      await Bun.file('catalogue/models.yaml').text(),
      'catalogue/models.yaml',
    )
    expect(report.skipped).toEqual([])
    const u = await makeUser(shipped)
    const run = async (lines: string[], endpoint = '/v1/chat/completions') => {
      const batch = await makeBatch(shipped, u, jsonl(lines), { endpoint })
      await validateAll(shipped)
      return getBatch(shipped, u, batch.id)
    }
    const instruct = 'llama-3-1-8b-instruct-q4km'
    expect(
      await run([
        chatLine('a', instruct, { response_format: { type: 'json_object' } }),
        chatLine('b', instruct, { logprobs: true, top_logprobs: 5 }),
      ]),
    ).toMatchObject({ status: 'validated', needs: ['json_mode', 'logprobs'] })
    expect(
      await run([
        chatLine('a', 'llava-1-6-mistral-7b-q40', { response_format: { type: 'json_object' } }, withImage),
      ]),
    ).toMatchObject({ status: 'validated', needs: ['json_mode', 'vision'] })
    expect(
      await run(
        [JSON.stringify({ custom_id: 'a', body: { model: 'nomic-embed-text-v1-5-f16', input: 'x' } })],
        '/v1/embeddings',
      ),
    ).toMatchObject({ status: 'validated', needs: ['embeddings'] })
    // The base model declares logprobs only: JSON output and images are refused at validation.
    const base = await run([
      chatLine('a', 'llama-3-1-8b-q4km', { logprobs: true }),
      chatLine('b', 'llama-3-1-8b-q4km', { response_format: { type: 'json_object' } }, withImage),
    ])
    expect(codes(base)).toEqual([
      ['unsupported_capability', 2, 'body.response_format'],
      ['unsupported_capability', 2, 'body.messages[1].content[1]'],
    ])
  })
})
