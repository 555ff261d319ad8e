import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { rootCertificates } from 'node:tls'
import { cleartextWarning, isLoopback, readCaFile, sendsInClear, trusting } from '../../src/lib/tls-client'

// The decision behind the clear-text warning of the daemon and the client, and --ca-file's reading
// (src/lib/tls-client.ts, docs/deployment.md "TLS on the binary").

const dir = mkdtempSync(join(tmpdir(), 'gk-tls-client-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('a key sent in clear text', () => {
  test.each([
    ['http://gpu-lab:8080', true],
    ['http://gridkeep.lab.example.org', true],
    ['http://192.168.1.20:8080', true],
    ['http://10.0.0.5', true],
    ['http://[fd00::2]:8080', true],
    ['http://128.0.0.1', true],
    ['http://localhost.example.org', true],
    ['https://gpu-lab:8443', false],
    ['https://192.168.1.20', false],
    ['http://localhost:8080', false],
    ['http://LOCALHOST.:8080', false],
    ['http://gridkeep.localhost', false],
    ['http://127.0.0.1:8080', false],
    ['http://127.1.2.3', false],
    ['http://[::1]:8080', false],
    ['http://[::ffff:127.0.0.1]', false],
    ['not a url', false],
  ])('%s: %p', (url, clear) => {
    expect(sendsInClear(url)).toBe(clear)
  })

  test('loopback by name or address, as a URL writes it', () => {
    expect(['localhost', 'a.localhost', '127.0.0.1', '[::1]', '::1'].every(isLoopback)).toBe(true)
    expect(['vm', '0.0.0.0', '::', '192.0.2.2'].some(isLoopback)).toBe(false)
  })

  test('the warning names the address, never a path or a query', () => {
    expect(cleartextWarning('the worker key', 'http://gpu-lab:8080/v1?token=x')).toBe(
      'sending the worker key to http://gpu-lab:8080 in clear text (http:// to a host that is not this machine): anyone on the network can read it; use https:// (docs/deployment.md "TLS on the binary")',
    )
  })
})

describe('--ca-file', () => {
  test('a PEM certificate is read; anything else is refused naming the file', () => {
    const pem = join(dir, 'ca.pem')
    writeFileSync(pem, rootCertificates[0]!)
    expect(readCaFile(pem)).toBe(rootCertificates[0]!)
    const junk = join(dir, 'junk.pem')
    writeFileSync(junk, 'not a certificate')
    expect(() => readCaFile(junk)).toThrow(`${junk} holds no PEM certificate`)
    expect(() => readCaFile(join(dir, 'none.pem'))).toThrow(`cannot read ${join(dir, 'none.pem')} (ENOENT)`)
  })

  test('the CA is trusted beside the usual ones; without one, fetch keeps its defaults', () => {
    expect(trusting(undefined)).toEqual({})
    const { tls } = trusting('PEM')
    expect(tls!.ca[0]).toBe('PEM')
    expect(tls!.ca.slice(1)).toEqual([...rootCertificates])
  })
})
