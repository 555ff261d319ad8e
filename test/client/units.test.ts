import { afterAll, describe, expect, test } from 'bun:test'
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { metadataPairs, numberOption, parseArgs, positionals } from '../../src/client/args'
import { tokensLine } from '../../src/client/batch'
import {
  configPath,
  normalizeServer,
  readConfig,
  removeConfig,
  resolveTarget,
  writeConfig,
} from '../../src/client/config'
import { ClientError, EXIT, exitCodeOfStatus } from '../../src/client/exit'
import { formFilename, multipartUpload } from '../../src/client/upload'
import { formatBytes, formatDuration, RateMeter, timeLeft, View } from '../../src/client/view'

// The terminal client's pieces that need no server: argument parsing, the config file and its
// precedence, exit codes, the upload body, the two output modes. The client as a whole is tested
// end to end in binary.test.ts.

const dir = mkdtempSync(join(tmpdir(), 'gk-client-units-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const usage = (fn: () => unknown) => {
  try {
    fn()
  } catch (e) {
    expect(e).toBeInstanceOf(ClientError)
    return [(e as ClientError).exitCode, (e as Error).message]
  }
  throw new Error('no usage error')
}

describe('arguments', () => {
  const spec = {
    output: { value: true, short: 'o' },
    metadata: { value: true, repeat: true },
    wait: {},
  }

  test('long, short and --name=value options, repeats, flags and positionals, in any order', () => {
    expect(
      parseArgs(['in.jsonl', '-o', 'out.jsonl', '--wait', '--metadata', 'a=1', '--metadata=b=2=3'], spec),
    ).toEqual({
      options: { output: 'out.jsonl', wait: true, metadata: ['a=1', 'b=2=3'] },
      positionals: ['in.jsonl'],
    })
    expect(parseArgs(['--output=-', '--', '--wait', '-o'], spec)).toEqual({
      options: { output: '-' },
      positionals: ['--wait', '-o'],
    })
    expect(parseArgs(['-o', '-'], spec).options.output).toBe('-')
  })

  test('an unknown option, a missing value or a value given to a flag is a usage error naming it', () => {
    expect(usage(() => parseArgs(['--bogus'], spec))).toEqual([EXIT.usage, "unknown option '--bogus'"])
    expect(usage(() => parseArgs(['-x'], spec))).toEqual([EXIT.usage, "unknown option '-x'"])
    expect(usage(() => parseArgs(['-ow'], spec))).toEqual([EXIT.usage, "unknown option '-ow'"])
    expect(usage(() => parseArgs(['--output'], spec))).toEqual([
      EXIT.usage,
      "option '--output' needs a value",
    ])
    expect(usage(() => parseArgs(['-o', '--wait'], spec))).toEqual([EXIT.usage, "option '-o' needs a value"])
    expect(usage(() => parseArgs(['--wait=yes'], spec))).toEqual([
      EXIT.usage,
      "option '--wait' takes no value",
    ])
  })

  test('positionals, numbers and metadata pairs are checked', () => {
    const p = parseArgs(['a', 'b'], {})
    expect(positionals(p, ['FILE', 'OTHER'])).toEqual(['a', 'b'])
    expect(usage(() => positionals(p, ['FILE']))).toEqual([EXIT.usage, "unexpected argument 'b'"])
    expect(usage(() => positionals(p, ['FILE', 'OTHER', 'THIRD']))).toEqual([EXIT.usage, 'missing THIRD'])
    const n = (v: string) =>
      numberOption(parseArgs(['--interval', v], { interval: { value: true } }), 'interval', 2, 0.1, 60)
    expect(n('0.5')).toBe(0.5)
    for (const bad of ['0', '61', 'abc', ' ']) expect(usage(() => n(bad))[0]).toBe(EXIT.usage)
    expect(numberOption(parseArgs([], {}), 'interval', 2, 0.1, 60)).toBe(2)
    expect(metadataPairs(['project=thesis', 'note=a=b', 'empty='])).toEqual({
      project: 'thesis',
      note: 'a=b',
      empty: '',
    })
    expect(metadataPairs([])).toBeUndefined()
    expect(usage(() => metadataPairs(['=x']))[0]).toBe(EXIT.usage)
  })
})

describe('the config file', () => {
  let n = 0
  const env = (extra: Record<string, string> = {}) => ({ HOME: join(dir, `home-${++n}`), ...extra })
  const saved = {
    server: 'http://gridkeep.lab:8080',
    api_key: `gk-${'a'.repeat(40)}`,
    key_id: 'key_1',
    key_name: 'gridkeep-cli@laptop',
    email: 'me@lab.test',
  }

  test('$XDG_CONFIG_HOME/gridkeep/config.json, else ~/.config/gridkeep/config.json', () => {
    expect(configPath({ HOME: '/home/ada' })).toBe('/home/ada/.config/gridkeep/config.json')
    expect(configPath({ HOME: '/home/ada', XDG_CONFIG_HOME: '/cfg' })).toBe('/cfg/gridkeep/config.json')
  })

  test('written 0600 in a 0700 directory, also over a file and directory that were more open', () => {
    const e = env()
    const path = configPath(e)
    mkdirSync(join(e.HOME, '.config', 'gridkeep'), { recursive: true, mode: 0o755 })
    chmodSync(join(e.HOME, '.config', 'gridkeep'), 0o755)
    writeFileSync(path, '{}', { mode: 0o644 })
    chmodSync(path, 0o644)
    expect(writeConfig(e, saved)).toBe(path)
    expect(statSync(path).mode & 0o777).toBe(0o600)
    expect(statSync(join(e.HOME, '.config', 'gridkeep')).mode & 0o777).toBe(0o700)
    expect(readConfig(e)).toEqual(saved)
    removeConfig(e)
    expect(readConfig(e)).toBeNull()
  })

  test('a file that is not the client’s is a usage error naming it, never a guess', () => {
    const e = env()
    mkdirSync(join(e.HOME, '.config', 'gridkeep'), { recursive: true })
    writeFileSync(configPath(e), 'not json')
    expect(usage(() => readConfig(e))).toEqual([EXIT.usage, expect.stringContaining(configPath(e))])
    writeFileSync(configPath(e), JSON.stringify({ server: 'http://x' }))
    expect(usage(() => readConfig(e))[0]).toBe(EXIT.usage)
  })

  test('GRIDKEEP_SERVER and GRIDKEEP_API_KEY win over the file; the default server is localhost:8080', () => {
    const e = env()
    writeConfig(e, saved)
    expect(resolveTarget(e)).toMatchObject({ server: saved.server, key: saved.api_key, keySource: 'config' })
    expect(resolveTarget({ ...e, GRIDKEEP_SERVER: 'https://other.lab/' })).toMatchObject({
      server: 'https://other.lab',
      key: saved.api_key,
    })
    expect(resolveTarget({ ...e, GRIDKEEP_API_KEY: 'gk-env' })).toMatchObject({
      server: saved.server,
      key: 'gk-env',
      keySource: 'GRIDKEEP_API_KEY',
    })
    expect(resolveTarget(env({ GRIDKEEP_API_KEY: 'gk-env' }))).toMatchObject({
      server: 'http://localhost:8080',
    })
    expect(usage(() => resolveTarget(env()))[0]).toBe(EXIT.auth)
  })

  test('a server address is http(s), kept without its trailing slash', () => {
    expect(normalizeServer(' http://gk:8080/ ')).toBe('http://gk:8080')
    expect(normalizeServer('https://gk.lab/base//')).toBe('https://gk.lab/base')
    for (const bad of ['gk:8080', 'ftp://gk', 'http//gk', ''])
      expect(usage(() => normalizeServer(bad))[0]).toBe(EXIT.usage)
  })
})

test('exit codes: 401/403 auth, other 4xx invalid input, 429 and 5xx the server', () => {
  expect([401, 403, 400, 404, 409, 413, 429, 500, 507].map(exitCodeOfStatus)).toEqual([
    EXIT.auth,
    EXIT.auth,
    EXIT.invalid,
    EXIT.invalid,
    EXIT.invalid,
    EXIT.invalid,
    EXIT.server,
    EXIT.server,
    EXIT.server,
  ])
  expect(new Set(Object.values(EXIT)).size).toBe(Object.keys(EXIT).length)
})

test('the upload body: fields, then the file streamed, with a Content-Length that is the bytes sent', async () => {
  const path = join(dir, 'in "odd"\nname.jsonl')
  const content = '{"custom_id":"a"}\n'.repeat(10_000)
  writeFileSync(path, content)
  const seen: number[] = []
  const upload = multipartUpload(path, Buffer.byteLength(content), { purpose: 'batch' }, (n) => seen.push(n))
  const body = await new Response(upload.body).text()
  expect(Buffer.byteLength(body)).toBe(upload.length)
  expect(upload.headers['content-length']).toBe(String(upload.length))
  const boundary = /boundary=(.+)$/.exec(upload.headers['content-type']!)![1]
  expect(body).toStartWith(`--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`)
  expect(body).toContain(
    `name="file"; filename="in %22odd%22name.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n${content}\r\n--${boundary}--\r\n`,
  )
  expect(seen.at(-1)).toBe(Buffer.byteLength(content))
  expect(seen).toEqual([...seen].sort((a, b) => a - b))
  expect(formFilename('/a/b/c.jsonl')).toBe('c.jsonl')
  // No write of the form's own bytes alone: the head goes with the first chunk of the file, the tail
  // with the last (a small write of its own waits for the peer's delayed ACK).
  const big = join(dir, 'big.jsonl')
  writeFileSync(big, 'x'.repeat(3 * 1024 * 1024))
  const chunks: Uint8Array[] = []
  const framed = multipartUpload(big, 3 * 1024 * 1024, { purpose: 'batch' }, () => {})
  for await (const chunk of framed.body) chunks.push(chunk)
  const text = (c: Uint8Array) => new TextDecoder().decode(c)
  expect(chunks.length).toBeGreaterThan(2)
  expect(text(chunks[0]!)).toMatch(/^--gridkeep-[\s\S]*\r\n\r\nx{1000}/)
  expect(text(chunks.at(-1)!)).toMatch(/x{1000}\r\n--gridkeep-[0-9a-f-]+--\r\n$/)
  expect(chunks.reduce((n, c) => n + c.byteLength, 0)).toBe(framed.length)
  // The file changed size after it was measured: the body fails rather than lie about its length.
  const short = multipartUpload(path, Buffer.byteLength(content) + 1, {}, () => {})
  await expect(new Response(short.body).text()).rejects.toMatchObject({
    exitCode: EXIT.invalid,
    message: expect.stringContaining('shrank'),
  })
})

test('JSON mode: stdout has only JSON lines, sentences go to stderr; a terminal gets sentences and a live line', () => {
  const out: string[] = []
  const err: string[] = []
  const streams = { stdout: (t: string) => void out.push(t), stderr: (t: string) => void err.push(t) }
  const json = new View(true, streams)
  json.event('batch', { batch_id: 'b', status: 'validated' })
  json.say('validated')
  json.setLive('live')
  json.data({ id: 'b' })
  expect(out).toEqual(['{"event":"batch","batch_id":"b","status":"validated"}\n', '{"id":"b"}\n'])
  expect(err).toEqual(['validated\n'])
  out.length = 0
  err.length = 0
  const tty = new View(false, streams)
  tty.event('batch', { batch_id: 'b' })
  tty.setLive('1/2 done')
  tty.say('an error line')
  tty.setLive('2/2 done')
  tty.keepLive()
  expect(out.join('')).toBe('\r\x1b[K1/2 done\r\x1b[Kan error line\n\r\x1b[K2/2 done\n')
  expect(err).toEqual([])
})

test('rate, time left and sizes as a person reads them', () => {
  const m = new RateMeter(30_000)
  expect(m.sample(0, 0)).toBeNull()
  expect(m.sample(10, 200)).toBeNull()
  expect(m.sample(100, 1000)).toBe(100)
  expect(m.sample(40, 2000)).toBeNull() // fewer than before: a shard requeued, the samples start over
  expect(timeLeft(500, 100)).toBe(5)
  expect(timeLeft(0, null)).toBe(0)
  expect(timeLeft(5, null)).toBeNull()
  expect([42, 125, 7260].map(formatDuration)).toEqual(['42 s', '2 min 5 s', '2 h 1 min'])
  expect([999, 1500, 200_000_000].map(formatBytes)).toEqual(['999 B', '1.5 KB', '200.0 MB'])
})

test('status’s tokens line: prompt tokens with the share served from cache, rounded down (docs/api.md §6 usage)', () => {
  const usage = (input: number, cached: number, output: number) => ({
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached },
    output_tokens: output,
  })
  expect(tokensLine(usage(1_500, 1_140, 30))).toBe('1,500 prompt (76 % from cache), 30 completion')
  expect(tokensLine(usage(1_000, 999, 0))).toBe('1,000 prompt (99 % from cache), 0 completion')
  expect(tokensLine(usage(0, 0, 0))).toBe('0 prompt, 0 completion')
})
