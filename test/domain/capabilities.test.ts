import { describe, expect, test } from 'bun:test'
import {
  covers,
  endpointNeeds,
  lineNeeds,
  modelCapabilities,
  needsKey,
  needsOf,
  runtimeCapabilities,
  takeableNeeds,
} from '../../src/domain/capabilities'

// docs/api.md §4 (model capabilities), §6 (what a line asks for), §7 (engine defaults, Poll rule 7).

const chat = (body: Record<string, unknown>) => lineNeeds('/v1/chat/completions', body)
const image = { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }

describe('lineNeeds: what a line asks for, with the first field asking', () => {
  test('chat: response_format json_object / json_schema → json_mode; text or absent → nothing', () => {
    expect(chat({ response_format: { type: 'json_object' } })).toEqual([
      { capability: 'json_mode', field: 'body.response_format' },
    ])
    expect(
      chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {} } } }),
    ).toEqual([{ capability: 'json_mode', field: 'body.response_format' }])
    expect(chat({ response_format: { type: 'text' } })).toEqual([])
    expect(chat({ response_format: 'json_object' })).toEqual([])
    expect(chat({ messages: [{ role: 'user', content: 'hi' }] })).toEqual([])
  })

  test('chat: the first image_url part of any message → vision, named by its place', () => {
    const messages = [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      { role: 'user', content: [{ type: 'text', text: 'look' }, image, image] },
      { role: 'user', content: [image] },
    ]
    expect(chat({ messages })).toEqual([{ capability: 'vision', field: 'body.messages[2].content[1]' }])
    expect(chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }] })).toEqual([])
    // Not the chat shape at all: nothing asked (the engine answers what it makes of it).
    expect(chat({ messages: 'x' })).toEqual([])
    expect(chat({ messages: [null, 3, { content: [null, 'image_url'] }] })).toEqual([])
  })

  test('logprobs: true or a number asks; false and null do not; top_logprobs alone asks too', () => {
    expect(chat({ logprobs: true, top_logprobs: 3 })).toEqual([
      { capability: 'logprobs', field: 'body.logprobs' },
    ])
    expect(chat({ logprobs: false })).toEqual([])
    expect(chat({ logprobs: null, top_logprobs: null })).toEqual([])
    expect(chat({ top_logprobs: 0 })).toEqual([{ capability: 'logprobs', field: 'body.top_logprobs' }])
    // The completions form: the number of most likely tokens.
    expect(lineNeeds('/v1/completions', { prompt: 'x', logprobs: 0 })).toEqual([
      { capability: 'logprobs', field: 'body.logprobs' },
    ])
  })

  test('every capability of one line, each once, in the order json_mode, vision, logprobs', () => {
    expect(
      chat({
        logprobs: true,
        messages: [{ role: 'user', content: [image] }],
        response_format: { type: 'json_object' },
      }).map((n) => n.capability),
    ).toEqual(['json_mode', 'vision', 'logprobs'])
  })

  test('/v1/responses: text.format, input_image parts, top_logprobs or the logprobs include', () => {
    const responses = (body: Record<string, unknown>) => lineNeeds('/v1/responses', body)
    expect(
      responses({
        text: { format: { type: 'json_schema', name: 'x', schema: {} } },
        input: [
          { role: 'user', content: 'plain' },
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'look' },
              { type: 'input_image', image_url: 'x' },
            ],
          },
        ],
        include: ['message.output_text.logprobs'],
      }),
    ).toEqual([
      { capability: 'json_mode', field: 'body.text.format' },
      { capability: 'vision', field: 'body.input[1].content[1]' },
      { capability: 'logprobs', field: 'body.include' },
    ])
    expect(responses({ top_logprobs: 2 })).toEqual([{ capability: 'logprobs', field: 'body.top_logprobs' }])
    // The chat names mean nothing there, and the responses names nothing on chat.
    expect(responses({ response_format: { type: 'json_object' }, logprobs: true })).toEqual([])
    expect(chat({ text: { format: { type: 'json_object' } } })).toEqual([])
  })

  test('the endpoint: /v1/embeddings needs embeddings, the others nothing', () => {
    expect(endpointNeeds('/v1/embeddings')).toEqual(['embeddings'])
    expect(endpointNeeds('/v1/chat/completions')).toEqual([])
    expect(lineNeeds('/v1/embeddings', { input: 'x' })).toEqual([])
  })
})

describe('what a model and an engine can do', () => {
  test('model: the capabilities set to true; embedding and vision entries have theirs by task_type', () => {
    expect(
      modelCapabilities({
        capabilities: { json_mode: true, logprobs: false, tools: true },
        task_type: 'chat',
      }),
    ).toEqual(['json_mode'])
    expect(modelCapabilities({ capabilities: {}, task_type: 'embedding' })).toEqual(['embeddings'])
    expect(modelCapabilities({ capabilities: { vision: false }, task_type: 'vision' })).toEqual(['vision'])
    expect(modelCapabilities({ capabilities: null, task_type: null })).toEqual([])
  })

  test('engine: the documented defaults, each reported value winning; an unknown engine has none', () => {
    expect(runtimeCapabilities('ollama', null)).toEqual(['json_mode', 'vision', 'embeddings', 'logprobs'])
    expect(runtimeCapabilities('tgi', undefined)).toEqual(['json_mode', 'vision', 'logprobs'])
    expect(runtimeCapabilities('lmstudio', {})).toEqual(['json_mode', 'vision', 'embeddings'])
    expect(runtimeCapabilities('lmstudio', { logprobs: true, vision: false })).toEqual([
      'json_mode',
      'embeddings',
      'logprobs',
    ])
    expect(runtimeCapabilities('something-new', null)).toEqual([])
  })
})

describe('stored needs', () => {
  test('one spelling per set, in a fixed order; read back as names', () => {
    expect(needsKey(['logprobs', 'json_mode', 'logprobs'])).toBe('json_mode,logprobs')
    expect(needsKey([])).toBe('')
    expect(needsOf('json_mode,logprobs')).toEqual(['json_mode', 'logprobs'])
    expect(needsOf('')).toEqual([])
  })

  test('takeableNeeds: every subset of what the worker can do, the empty need first', () => {
    expect(takeableNeeds([])).toEqual([''])
    expect(takeableNeeds(['logprobs', 'json_mode']).sort()).toEqual([
      '',
      'json_mode',
      'json_mode,logprobs',
      'logprobs',
    ])
    expect(takeableNeeds(['json_mode', 'vision', 'embeddings', 'logprobs'])).toHaveLength(16)
    expect(new Set(takeableNeeds(['json_mode', 'vision', 'embeddings', 'logprobs'])).size).toBe(16)
    expect(covers(['json_mode', 'vision'], needsOf('json_mode'))).toBe(true)
    expect(covers(['vision'], needsOf('json_mode,vision'))).toBe(false)
  })
})
