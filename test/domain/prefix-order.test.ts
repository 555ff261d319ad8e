import { describe, expect, test } from 'bun:test'
import {
  executionOrder,
  KEY_LEVELS,
  MIN_ORDERED_CHARS,
  PrefixOrder,
  prefixKey,
  promptParts,
  walkOrder,
} from '../../src/domain/prefix-order'

// docs/api.md §6 "Execution order": the rule every engine stores, decided once in
// src/domain/prefix-order.ts — a pure function of the lines' prompts.

/** A prompt's parts, copied (promptParts reuses its array). */
const parts = (endpoint: string, body: Record<string, unknown>, min?: number) => {
  const p = promptParts(endpoint, body, min)
  return p && [...p]
}
const chat = (...messages: { role: string; content: unknown }[]) =>
  parts('/v1/chat/completions', { model: 'm', messages })!
/** Text long enough to count (over MIN_ORDERED_CHARS), distinct per `seed`. */
const long = (seed: string, chars = 600) =>
  `${seed}: ${'lorem ipsum dolor sit amet '.repeat(chars / 27 + 1)}`.slice(0, chars)

/** The file-order indexes of `items` in execution order (null: the file order). */
const orderOf = (prompts: (string | readonly string[] | null)[]) => {
  const o = executionOrder(prompts)
  return o ? [...o] : null
}

describe('the prompt as the engine sees it', () => {
  test('chat: the tools first, then each message’s role and content, in order', () => {
    const tools = [{ type: 'function', function: { name: 'f' } }]
    const content = [{ type: 'text', text: 'U' }]
    expect(
      parts('/v1/chat/completions', {
        messages: [
          { role: 'system', content: 'S' },
          { role: 'user', content },
        ],
        tools,
      }),
    ).toEqual([JSON.stringify(tools), 'system', 'S', 'user', JSON.stringify(content)])
    // The same text under another role is another prompt.
    const k1 = new Float64Array(KEY_LEVELS)
    const k2 = new Float64Array(KEY_LEVELS)
    prefixKey(chat({ role: 'user', content: 'S' }), k1)
    prefixKey(chat({ role: 'system', content: 'S' }), k2)
    expect(k1[0]).not.toBe(k2[0])
  })

  test('completions take the prompt, embeddings the input, responses the instructions then the input', () => {
    expect(parts('/v1/completions', { prompt: 'once upon' })).toEqual(['once upon'])
    expect(parts('/v1/embeddings', { input: ['a', 'b'] })).toEqual(['["a","b"]'])
    expect(
      parts('/v1/responses', { instructions: 'Be brief.', input: [{ role: 'user', content: 'hi' }] }),
    ).toEqual(['Be brief.', 'user', 'hi'])
    expect(parts('/v1/responses', { input: 'plain' })).toEqual(['plain'])
  })

  test('a prompt not longer than the minimum is null', () => {
    const x = 'x'.repeat(MIN_ORDERED_CHARS)
    expect(parts('/v1/completions', { prompt: x }, MIN_ORDERED_CHARS)).toBeNull()
    expect(parts('/v1/completions', { prompt: `${x}y` }, MIN_ORDERED_CHARS)).toEqual([`${x}y`])
  })
})

describe('the key: chained hashes at doubling boundaries', () => {
  test('two prompts share the levels up to the last boundary they share, and no further', () => {
    const shared = 'a'.repeat(1100)
    const k1 = new Float64Array(KEY_LEVELS)
    const k2 = new Float64Array(KEY_LEVELS)
    const n1 = prefixKey(`${shared}${'b'.repeat(3000)}`, k1)
    const n2 = prefixKey(`${shared}${'c'.repeat(3000)}`, k2)
    expect(n1).toBe(n2)
    // Boundaries 256, 512 and 1,024 lie within the shared part; 2,048 does not.
    expect([...k1.slice(0, 3)]).toEqual([...k2.slice(0, 3)])
    for (let i = 3; i < KEY_LEVELS; i++) expect(k1[i]).not.toBe(k2[i])
  })

  test('parts are links of the chain: the same text split into other parts is another prompt', () => {
    const a = new Float64Array(KEY_LEVELS)
    const b = new Float64Array(KEY_LEVELS)
    const c = new Float64Array(KEY_LEVELS)
    prefixKey(['system', 'x'.repeat(1000)], a)
    prefixKey(['system', 'x'.repeat(1000)], b)
    prefixKey(['systemx', 'x'.repeat(999)], c)
    expect([...a]).toEqual([...b])
    expect(a[0]).not.toBe(c[0])
    // A boundary that falls between two parts still ends a level.
    const d = new Float64Array(KEY_LEVELS)
    const e = new Float64Array(KEY_LEVELS)
    expect(prefixKey(['y'.repeat(256), 'z'.repeat(100)], d)).toBe(2)
    expect(prefixKey(['y'.repeat(256), 'w'.repeat(100)], e)).toBe(2)
    expect(d[0]).toBe(e[0])
    expect(d[1]).not.toBe(e[1])
  })

  test('a key has a fixed size: every level past the prompt holds the whole prompt', () => {
    const k = new Float64Array(KEY_LEVELS)
    expect(prefixKey('z'.repeat(700), k)).toBe(3)
    expect(new Set(k.slice(2)).size).toBe(1)
    // A prompt that stops exactly at a boundary is not the prefix of a longer one at that level.
    const at = new Float64Array(KEY_LEVELS)
    const longer = new Float64Array(KEY_LEVELS)
    prefixKey('y'.repeat(512), at)
    prefixKey('y'.repeat(900), longer)
    expect(at[0]).toBe(longer[0])
    expect(at[1]).not.toBe(longer[1])
  })
})

describe('the execution order (a trie walk)', () => {
  test('documents × questions in question-major order run document-major', () => {
    const docs = [0, 1, 2, 3].map((d) => long(`doc ${d}`, 1500))
    const prompts: string[][] = []
    for (const q of ['What?', 'Why?', 'Who?'])
      for (const d of docs)
        prompts.push(chat({ role: 'system', content: 'Answer.' }, { role: 'user', content: `${d}\n${q}` }))
    expect(orderOf(prompts)).toEqual([0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11])
  })

  test('one shared instruction and a record per line: the file order (nothing to store)', () => {
    const instruction = long('instructions', 6000)
    const prompts = Array.from({ length: 50 }, (_, i) =>
      chat({ role: 'system', content: instruction }, { role: 'user', content: `record ${i}` }),
    )
    expect(orderOf(prompts)).toBeNull()
  })

  test('lines that share nothing keep the file order', () => {
    expect(orderOf(Array.from({ length: 30 }, (_, i) => long(`line ${i}`)))).toBeNull()
    // Short prompts (at most MIN_ORDERED_CHARS) share nothing worth ordering, even when equal.
    expect(orderOf(['hi', 'there', 'hi', 'there'])).toBeNull()
  })

  test('the longest shared part first: nested groups, each group where its first line was', () => {
    const a = long('A', 300)
    const ax = `${a}${long('x', 800)}`
    const ay = `${a}${long('y', 800)}`
    // File order: A·x·1, B, A·y·1, A·x·2, C, A·y·2, B again (an exact duplicate).
    const b = long('B', 900)
    const prompts = [`${ax}1`, b, `${ay}1`, `${ax}2`, long('C', 900), `${ay}2`, b]
    // A's lines first (where A·x·1 stood): those sharing A·x (the longer part) before A·y; then B
    // with its duplicate; then C, which shares nothing.
    expect(orderOf(prompts)).toEqual([0, 3, 2, 5, 1, 6, 4])
  })

  test('lines without a prompt share nothing and keep their place among the groups', () => {
    const d = long('doc', 900)
    expect(orderOf([`${d}1`, null, long('other', 900), `${d}2`])).toEqual([0, 3, 1, 2])
  })

  test('walkOrder: a line, then its children deepest-shared first, each followed by its subtree', () => {
    // 0 ← 2 (depth 1), 0 ← 3 (depth 2), 1 root, 1 ← 4 (depth 2), 2 ← 5 (depth 3).
    const o = walkOrder(
      6,
      Uint32Array.from([2, 3, 4, 5]),
      Uint32Array.from([0, 0, 1, 2]),
      Uint8Array.from([1, 2, 2, 3]),
    )
    expect([...o!]).toEqual([0, 3, 2, 5, 1, 4])
    expect(walkOrder(3, Uint32Array.from([2]), Uint32Array.from([1]), Uint8Array.from([1]))).toBeNull()
    expect(walkOrder(1_000, new Uint32Array(0), new Uint32Array(0), new Uint8Array(0))).toBeNull()
  })

  test('memory: 9 bytes a line that shares a prefix, none for the others, and a table entry per distinct prefix node', () => {
    const order = new PrefixOrder()
    const doc = long('shared', 5000)
    for (let i = 0; i < 20_000; i++) order.add(`${doc} question ${i}`)
    // 20,000 lines of 5,000 characters (100 MB of prompt): the 5 levels every line shares are 5
    // nodes; each line adds its own whole-prompt node.
    expect(order.bytes).toBeLessThan(2 * 20_000 * 9 + 4 * 20_000 * 12 + 64 * 1024)
    expect(order.finish()).toBeNull()
    // Lines too short to order cost nothing but their count.
    const short = new PrefixOrder()
    for (let i = 0; i < 100_000; i++) short.add(`line ${i}`)
    expect(short.bytes).toBe(new PrefixOrder().bytes)
    expect(short.finish()).toBeNull()
  })
})
