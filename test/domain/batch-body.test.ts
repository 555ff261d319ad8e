import { describe, expect, test } from 'bun:test'
import { BODIES, checkBody } from '../../src/domain/batch-body'
import { BATCH_ENDPOINTS } from '../../src/domain/batch-line'

// docs/api.md §6 "Request bodies": the body fields validation checks per endpoint, each rule with the
// field it names; everything else passes unchecked.

const R = '/v1/responses'
const problems = (body: Record<string, unknown>, endpoint: string = R) =>
  checkBody(endpoint, { model: 'm', ...body }).map((p) => [p.code, p.field])

describe('/v1/responses', () => {
  test('a string input, or an array of input items, with the documented fields passes', () => {
    expect(problems({ input: 'hello' })).toEqual([])
    expect(
      problems({
        input: [
          { role: 'system', content: 'Be brief' },
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
        ],
        instructions: 'Answer in French',
        max_output_tokens: 64,
        temperature: 0,
        top_p: 1,
        top_logprobs: 20,
        seed: -1,
        text: { format: { type: 'json_schema', name: 'answer', schema: { type: 'object' }, strict: true } },
        tools: [{ type: 'function', name: 'f', parameters: {} }],
        tool_choice: { type: 'function', name: 'f' },
        parallel_tool_calls: false,
        store: false,
        reasoning: { effort: 'low' },
        metadata: { run: '7' },
        truncation: 'auto',
        user: 'u-1',
        include: ['message.output_text.logprobs'],
        stream: false,
        background: false,
      }),
    ).toEqual([])
    for (const format of [{ type: 'text' }, { type: 'json_object' }])
      expect(problems({ input: 'x', text: { format } })).toEqual([])
    for (const choice of ['none', 'auto', 'required'])
      expect(problems({ input: 'x', tool_choice: choice })).toEqual([])
  })

  test('input is required; null counts as absent for every field', () => {
    expect(problems({})).toEqual([['missing_field', 'body.input']])
    expect(problems({ input: null })).toEqual([['missing_field', 'body.input']])
    const nulls = Object.fromEntries(Object.keys(BODIES[R]).map((k) => [k, null]))
    expect(problems({ ...nulls, input: 'x' })).toEqual([])
  })

  test('unknown body fields pass unchecked, as on every endpoint', () => {
    expect(problems({ input: 'x', top_k: 'whatever', prompt: { id: 'p' }, service_tier: 7 })).toEqual([])
  })

  test('each field’s wrong type is invalid_type and a value out of range invalid_value, named by path', () => {
    const cases: [Record<string, unknown>, string, string][] = [
      [{ input: 5 }, 'invalid_type', 'body.input'],
      [{ input: { role: 'user' } }, 'invalid_type', 'body.input'],
      [{ input: ['hi'] }, 'invalid_type', 'body.input'],
      [{ instructions: ['a'] }, 'invalid_type', 'body.instructions'],
      [{ max_output_tokens: '8' }, 'invalid_type', 'body.max_output_tokens'],
      [{ max_output_tokens: 1.5 }, 'invalid_type', 'body.max_output_tokens'],
      [{ max_output_tokens: 0 }, 'invalid_value', 'body.max_output_tokens'],
      [{ temperature: 'hot' }, 'invalid_type', 'body.temperature'],
      [{ temperature: 2.5 }, 'invalid_value', 'body.temperature'],
      [{ temperature: -0.1 }, 'invalid_value', 'body.temperature'],
      [{ top_p: 1.01 }, 'invalid_value', 'body.top_p'],
      [{ top_logprobs: 21 }, 'invalid_value', 'body.top_logprobs'],
      [{ top_logprobs: true }, 'invalid_type', 'body.top_logprobs'],
      [{ seed: 0.5 }, 'invalid_type', 'body.seed'],
      [{ text: 'json' }, 'invalid_type', 'body.text'],
      [{ text: { format: 'json_object' } }, 'invalid_type', 'body.text.format'],
      [{ text: { format: {} } }, 'missing_field', 'body.text.format.type'],
      [{ text: { format: { type: 'yaml' } } }, 'invalid_value', 'body.text.format.type'],
      [{ text: { format: { type: 3 } } }, 'invalid_type', 'body.text.format.type'],
      [{ text: { format: { type: 'json_schema', schema: {} } } }, 'invalid_type', 'body.text.format.name'],
      [{ text: { format: { type: 'json_schema', name: 'a' } } }, 'invalid_type', 'body.text.format.schema'],
      [{ tools: { type: 'function' } }, 'invalid_type', 'body.tools'],
      [{ tools: [{ type: 'function' }, { name: 'untyped' }] }, 'invalid_type', 'body.tools'],
      [{ tool_choice: 'always' }, 'invalid_value', 'body.tool_choice'],
      [{ tool_choice: { name: 'f' } }, 'invalid_type', 'body.tool_choice'],
      [{ parallel_tool_calls: 'yes' }, 'invalid_type', 'body.parallel_tool_calls'],
      [{ store: 1 }, 'invalid_type', 'body.store'],
      [{ reasoning: 'high' }, 'invalid_type', 'body.reasoning'],
      [{ metadata: { n: 1 } }, 'invalid_type', 'body.metadata'],
      [{ metadata: ['a'] }, 'invalid_type', 'body.metadata'],
      [{ truncation: 'middle' }, 'invalid_value', 'body.truncation'],
      [{ user: 42 }, 'invalid_type', 'body.user'],
      [{ include: 'reasoning.encrypted_content' }, 'invalid_type', 'body.include'],
      [{ include: [1] }, 'invalid_type', 'body.include'],
      [{ stream: 'no' }, 'invalid_type', 'body.stream'],
      [{ background: 'no' }, 'invalid_type', 'body.background'],
    ]
    for (const [body, code, field] of cases) {
      const found = checkBody(R, { model: 'm', input: 'x', ...body })
      expect([JSON.stringify(body), found.map((p) => [p.code, p.field])]).toEqual([
        JSON.stringify(body),
        [[code, field]],
      ])
      expect(found[0]!.message).toContain(field)
    }
  })

  test('what a batch request cannot carry is unsupported_value', () => {
    expect(problems({ input: 'x', stream: true })).toEqual([['unsupported_value', 'body.stream']])
    expect(problems({ input: 'x', background: true })).toEqual([['unsupported_value', 'body.background']])
    expect(problems({ input: 'x', previous_response_id: 'resp_1' })).toEqual([
      ['unsupported_value', 'body.previous_response_id'],
    ])
    expect(problems({ input: 'x', conversation: { id: 'conv_1' } })).toEqual([
      ['unsupported_value', 'body.conversation'],
    ])
  })

  test('every problem of a body, one a field, in the table’s order', () => {
    expect(
      problems({
        conversation: 'conv_1',
        stream: true,
        temperature: 9,
        text: { format: { type: 'xml' } },
        max_output_tokens: -1,
      }),
    ).toEqual([
      ['missing_field', 'body.input'],
      ['invalid_value', 'body.max_output_tokens'],
      ['invalid_value', 'body.temperature'],
      ['invalid_value', 'body.text.format.type'],
      ['unsupported_value', 'body.stream'],
      ['unsupported_value', 'body.conversation'],
    ])
  })
})

describe('the other endpoints', () => {
  test('only stream is checked: true is unsupported_value, false passes; other fields are the engine’s', () => {
    for (const endpoint of ['/v1/chat/completions', '/v1/completions', '/v1/embeddings']) {
      expect(problems({ stream: true }, endpoint)).toEqual([['unsupported_value', 'body.stream']])
      expect(problems({ stream: false, temperature: 'hot', input: 5, background: true }, endpoint)).toEqual(
        [],
      )
    }
  })

  test('every batch endpoint has a body description', () => {
    expect(Object.keys(BODIES).sort()).toEqual([...BATCH_ENDPOINTS].sort())
  })
})
