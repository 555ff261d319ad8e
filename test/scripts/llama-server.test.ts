import { afterAll, describe, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { debianMirror, fetchEngine, TINY, tinyModel, writeTinyModel } from '../../scripts/llama-server'

// scripts/llama-server.ts without the network: where the mirror comes from, why a fetch is not
// possible, and the tiny model's bytes. The engine itself is exercised by test/daemon/llama.test.ts.

const root = mkdtempSync(join(tmpdir(), 'gk-llama-script-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

function etcApt(files: Record<string, string>) {
  const dir = mkdtempSync(join(root, 'apt-'))
  mkdirSync(join(dir, 'sources.list.d'))
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text)
  return dir
}

describe('the mirror comes from the machine’s own apt sources', () => {
  test('deb822 sources: the main archive, not security, not a disabled stanza', () => {
    const dir = etcApt({
      'sources.list.d/debian.sources': [
        'Types: deb',
        'URIs: http://192.0.2.1/debian-security',
        'Suites: bookworm-security',
        '',
        'Types: deb',
        'URIs: http://192.0.2.2/debian',
        'Enabled: no',
        '',
        'Types: deb-src deb',
        'URIs: http://192.0.2.1/debian/',
        'Suites: bookworm',
      ].join('\n'),
    })
    expect(debianMirror(dir)).toBe('http://192.0.2.1/debian')
  })

  test('one-line sources.list, with options; files of other extensions are ignored', () => {
    const dir = etcApt({
      'sources.list':
        '# deb http://192.0.2.3/debian bookworm main\ndeb [arch=amd64] https://192.0.2.4/debian bookworm main\n',
      'sources.list.d/other.list.disabled': 'deb http://192.0.2.5/debian sid main\n',
    })
    expect(debianMirror(dir)).toBe('https://192.0.2.4/debian')
  })

  test('no Debian mirror: the fetch says why instead of throwing', () => {
    const dir = etcApt({ 'sources.list': 'deb https://192.0.2.6/apt stable main\n' })
    expect(debianMirror(dir)).toBeNull()
    const result = fetchEngine(join(root, 'empty-cache'), dir)
    expect(result).toEqual({ ok: false, reason: `no Debian mirror found in ${dir}/sources.list(.d)` })
  })

  test('a cache directory that cannot be made: the fetch says why instead of throwing', () => {
    const dir = etcApt({ 'sources.list': 'deb http://192.0.2.1/debian bookworm main\n' })
    const result = fetchEngine('/proc/gridkeep-no-such-dir/cache', dir)
    expect(result.ok).toBe(false)
    expect(!result.ok && result.reason).toContain('could not fetch into /proc/gridkeep-no-such-dir/cache')
  })
})

describe('the tiny model', () => {
  test('the same GGUF v3 bytes on every call, about half a megabyte', () => {
    const a = tinyModel()
    const b = tinyModel()
    expect(Buffer.compare(a, b)).toBe(0)
    const view = new DataView(a.buffer, a.byteOffset)
    expect(new TextDecoder().decode(a.subarray(0, 4))).toBe('GGUF')
    expect(view.getUint32(4, true)).toBe(3)
    // 2 layers × 9 tensors, plus embeddings, output norm and output.
    expect(Number(view.getBigUint64(8, true))).toBe(TINY.layers * 9 + 3)
    expect(a.length).toBeGreaterThan(400_000)
    expect(a.length).toBeLessThan(700_000)
  })

  test('its vocabulary holds the 256 byte tokens', () => {
    const text = new TextDecoder('latin1').decode(tinyModel().subarray(0, 20_000))
    for (const b of [0x00, 0x0a, 0x41, 0xe2, 0xff])
      expect(text).toContain(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`)
  })

  test('another seed gives other weights of the same shape: another sha256', () => {
    const sha = (b: Uint8Array) => new Bun.CryptoHasher('sha256').update(b).digest('hex')
    const a = tinyModel(1)
    const b = tinyModel(2)
    expect(a.length).toBe(b.length)
    expect(sha(a)).not.toBe(sha(b))
    expect(sha(tinyModel(1))).toBe(sha(a))
    expect(sha(tinyModel())).toBe(sha(tinyModel(TINY.seed)))
  })

  test('writeTinyModel rewrites a file of the same size holding another seed’s bytes', async () => {
    const path = join(root, 'seeded.gguf')
    await writeTinyModel(path, 1)
    await writeTinyModel(path, 2)
    expect(Buffer.compare(await Bun.file(path).bytes(), tinyModel(2))).toBe(0)
  })
})
