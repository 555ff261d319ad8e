import { describe, expect, test } from 'bun:test'
import {
  KEY_LEVELS,
  KeyChain,
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

/** The file-order indexes of `prompts` in execution order (null: the file order), as validation builds it. */
const orderOf = (prompts: (string | readonly string[] | null)[]) => {
  const order = new PrefixOrder()
  for (const p of prompts) order.add(p)
  const o = order.finish()
  return o ? [...o] : null
}

/**
 * The rule done the plain way, holding every key: the lines inserted into the trie of their keys in
 * file order, each branching off at the deepest node an earlier line made (its first line the
 * parent, its depth the depth), then walked.
 */
const reference = (prompts: (string | null)[]) => {
  // Each node's first line, as its ordinal among the keyed lines.
  const first = new Map<number, number>()
  const line: number[] = []
  const parent: number[] = []
  const depth: number[] = []
  prompts.forEach((p, j) => {
    if (p === null || p.length <= MIN_ORDERED_CHARS) return
    const o = line.length
    const key = new Float64Array(KEY_LEVELS)
    const levels = prefixKey(p, key)
    let d = 0
    while (d < levels && first.has(key[d]!)) d++
    for (let i = d; i < levels; i++) first.set(key[i]!, o)
    line.push(j)
    parent.push(d ? first.get(key[d - 1]!)! : 0)
    depth.push(d)
  })
  const o = walkOrder(
    prompts.length,
    Uint32Array.from(line),
    Uint32Array.from(parent),
    Uint8Array.from(depth),
  )
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

  test('the chain holds 64 bits: 300,000 distinct prompts give 300,000 distinct keys', () => {
    // A chain whose seed kept 32 bits (as Bun's xxHash3 does) would hold about ten equal keys here.
    const seen = new Set<number>()
    const key = new Float64Array(KEY_LEVELS)
    const shared = long('shared document', 500)
    for (let i = 0; i < 300_000; i++) {
      const levels = prefixKey(['system', 'Answer briefly.', 'user', `${shared}\nQuestion ${i}?`], key)
      seen.add(key[levels - 1]!)
    }
    expect(seen.size).toBe(300_000)
  })

  test('role names are links, and tell prompts apart', () => {
    const key = (...p: string[]) => {
      const k = new Float64Array(KEY_LEVELS)
      prefixKey(p, k)
      return [...k]
    }
    const text = long('doc', 700)
    expect(key('user', text)).toEqual(key('user', text))
    expect(key('user', text)).not.toEqual(key('system', text))
    // Two roles in a row are not the same in either order; a role as the last part is hashed too.
    expect(key('user', 'assistant', text)).not.toEqual(key('assistant', 'user', text))
    expect(key(text, 'user')).not.toEqual(key(text, 'system'))
    // A role's name as text of its own is another prompt than the role.
    expect(key('user', text)).not.toEqual(key('usera', text.slice(1)))
  })

  test('the chain over the leading parts the prompt before shares is taken from it: the same keys', () => {
    const instructions = long('instructions', 2_000)
    const prompts: string[][] = [
      ['system', instructions, 'user', long('record 1', 300)],
      ['system', instructions, 'user', long('record 2', 300)],
      ['system', instructions, 'user', long('record 2', 300)],
      ['system', instructions],
      ['system', long('other instructions', 900), 'user', 'hi'],
      [long('alone', 5_000)],
      ['system', instructions, 'user', long('record 1', 300), 'assistant', long('answer', 700)],
    ]
    const chain = new KeyChain()
    for (const p of prompts) {
      const plain = new Float64Array(KEY_LEVELS)
      const chained = new Float64Array(KEY_LEVELS)
      expect(prefixKey(p, chained, chain)).toBe(prefixKey(p, plain))
      expect([...chained]).toEqual([...plain])
    }
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
    // Every line keyed: 0 ← 2 (depth 1), 0 ← 3 (depth 2), 1 root, 1 ← 4 (depth 2), 2 ← 5 (depth 3).
    const all = Uint32Array.from([0, 1, 2, 3, 4, 5])
    const o = walkOrder(6, all, Uint32Array.from([0, 0, 0, 0, 1, 2]), Uint8Array.from([0, 0, 1, 2, 2, 3]))
    expect([...o!]).toEqual([0, 3, 2, 5, 1, 4])
    // Lines 1, 4 and 6 not keyed (roots in place); keyed lines 0, 2, 3, 5, 7 (ordinals 0–4):
    // 3 ← 5 (depth 1), 0 ← 7 (depth 2).
    const some = walkOrder(
      8,
      Uint32Array.from([0, 2, 3, 5, 7]),
      Uint32Array.from([0, 0, 0, 2, 0]),
      Uint8Array.from([0, 0, 0, 1, 2]),
    )
    expect([...some!]).toEqual([0, 7, 1, 2, 3, 5, 4, 6])
    expect(
      walkOrder(3, Uint32Array.from([1, 2]), Uint32Array.from([0, 0]), Uint8Array.from([0, 1])),
    ).toBeNull()
    expect(walkOrder(1_000, new Uint32Array(0), new Uint32Array(0), new Uint8Array(0))).toBeNull()
  })

  test('the same order as the trie built line by line, on random nested groups', () => {
    // A deterministic generator: prompts built of shared pieces of several lengths, so lines share
    // 0 to several levels, with exact duplicates, short lines and lines without a prompt.
    let seed = 7
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    const pieces = Array.from({ length: 6 }, (_, i) =>
      long(`piece ${i}`, [200, 300, 700, 1500, 90, 2600][i]!),
    )
    for (let round = 0; round < 20; round++) {
      const prompts = Array.from({ length: 300 }, () => {
        if (rand(20) === 0) return null
        if (rand(20) === 0) return `short ${rand(5)}`
        let p = ''
        for (let parts = 1 + rand(4); parts > 0; parts--) p += pieces[rand(pieces.length)]
        return rand(3) === 0 ? p : `${p} tail ${rand(50)}`
      })
      const order = orderOf(prompts)
      expect(order).not.toBeNull()
      expect(order).toEqual(reference(prompts))
    }
  })

  test('the same order when a level holds too many distinct keys for one pass (the bit arrays decide)', () => {
    // 12,000 lines: groups that share a document (and some a question too), then many lines sharing
    // nothing, then lines sharing only the first level with the groups. At the first level more than
    // one key in 32 lines is distinct, so the first pass stops after the groups' lines matched and
    // the level starts again: the last lines' parents are still the groups' first lines.
    const prompts: string[] = []
    for (let i = 0; i < 2_000; i++) prompts.push(`${long(`doc ${i % 40}`, 700)} question ${i % 7}`)
    for (let i = 0; i < 8_000; i++) prompts.push(long(`alone ${i}`, 700))
    for (let i = 0; i < 2_000; i++) prompts.push(`${long(`doc ${i % 40}`, 300)}${long(`other ${i}`, 400)}`)
    const order = orderOf(prompts)
    expect(order).toEqual(reference(prompts))
    // The groups run together: doc 0's lines are next to each other.
    const at = order!.indexOf(0)
    expect(prompts[order![at + 1]!]!.startsWith(prompts[0]!.slice(0, 600))).toBe(true)
  })

  test('memory: per keyed line its number, its key’s level count and 8 bytes a distinct level; no table entry for a key that occurs once', () => {
    const chunk = 2 ** 14 * 8
    // While lines stream in: 20,000 lines of 5,000 characters (100 MB of prompt) sharing their first
    // 5,000: 6 distinct levels a line (256 … 4,096 and the whole prompt).
    const order = new PrefixOrder()
    const doc = long('shared', 5000)
    for (let i = 0; i < 20_000; i++) order.add(`${doc} question ${i}`)
    expect(order.bytes).toBeLessThanOrEqual(20_000 * (5 + 6 * 8) + 3 * chunk)
    expect(order.finish()).toBeNull()
    // 20,000 lines sharing nothing: at the end, 6 bytes a line (parent, depth, reach), the two bit
    // arrays (16 bits each a line, rounded up to a power of two) and a table for the few keys they let
    // by, or the one tried first, of at most a key for 32 lines — a table for every key would be
    // 262,144 bytes.
    const distinct = new PrefixOrder()
    for (let i = 0; i < 20_000; i++) distinct.add(long(`line ${i}`, 600))
    const streamed = distinct.bytes
    expect(streamed).toBeLessThanOrEqual(20_000 * (5 + 3 * 8) + 3 * chunk)
    expect(distinct.finish()).toBeNull()
    const bits = 2 ** Math.ceil(Math.log2(16 * 20_000)) / 8
    expect(distinct.peakBytes - streamed).toBeLessThanOrEqual(20_000 * 6 + 2 * bits + 32_768)
    // Lines too short to order cost nothing but their count.
    const short = new PrefixOrder()
    for (let i = 0; i < 100_000; i++) short.add(`line ${i}`)
    expect(short.bytes).toBe(0)
    expect(short.finish()).toBeNull()
    expect(short.peakBytes).toBe(0)
  })
})
