import { describe, expect, test } from 'bun:test'
import { TrustedProxies } from '../../src/lib/client-address'

// docs/deployment.md "The client's address behind a proxy": the client is the peer unless the peer
// is a trusted proxy; then the rightmost X-Forwarded-For entry that is not a trusted proxy.

describe('TRUSTED_PROXIES', () => {
  test('addresses and CIDR ranges of both families; anything else names the item', () => {
    const p = TrustedProxies.parse(' 127.0.0.1 , 10.0.0.0/8,fd00::/8, ::1 ')
    for (const trusted of ['127.0.0.1', '10.200.3.4', 'fd12::7', '::1', '::ffff:10.0.0.9'])
      expect([trusted, p.has(trusted)]).toEqual([trusted, true])
    for (const other of ['127.0.0.2', '11.0.0.1', 'fe80::1', '192.168.1.1', 'not-an-ip', ''])
      expect([other, p.has(other)]).toEqual([other, false])
    for (const bad of ['10.0.0.0/33', 'fd00::/129', 'proxy.lab', '10.0.0.0/', '10.0.0.0/x', '1.2.3.4:80'])
      expect(() => TrustedProxies.parse(`127.0.0.1,${bad}`)).toThrow(
        `expected IP addresses or CIDR ranges separated by commas (got ${JSON.stringify(bad)})`,
      )
    expect(TrustedProxies.parse(undefined).size).toBe(0)
    expect(TrustedProxies.parse(' , ').size).toBe(0)
  })

  test('no trusted proxies: the header is never read', () => {
    const none = TrustedProxies.parse(undefined)
    expect(none.clientAddress('127.0.0.1', '203.0.113.9')).toBe('127.0.0.1')
    expect(none.clientAddress(null, '203.0.113.9')).toBe(null)
  })

  test('an untrusted peer is the client whatever it sends', () => {
    const p = TrustedProxies.parse('10.0.0.0/8')
    expect(p.clientAddress('198.51.100.7', '203.0.113.9')).toBe('198.51.100.7')
    expect(p.clientAddress('198.51.100.7', '10.0.0.1')).toBe('198.51.100.7')
  })

  test('through trusted proxies: the rightmost entry that is not one of them', () => {
    const p = TrustedProxies.parse('127.0.0.1,10.0.0.0/8')
    // One proxy: it appended the client.
    expect(p.clientAddress('127.0.0.1', '198.51.100.7')).toBe('198.51.100.7')
    // The client sent its own header (a forgery, or a proxy of its own): only what the trusted
    // proxy appended counts.
    expect(p.clientAddress('127.0.0.1', '203.0.113.9, 198.51.100.7')).toBe('198.51.100.7')
    // Two trusted proxies: the inner one's hop is skipped.
    expect(p.clientAddress('127.0.0.1', '203.0.113.9, 198.51.100.7, 10.1.1.1')).toBe('198.51.100.7')
    // Every hop trusted: the leftmost, the furthest address known.
    expect(p.clientAddress('127.0.0.1', '10.0.0.5, 10.0.0.6')).toBe('10.0.0.5')
    // Entries with ports, IPv6, spaces, a header repeated (joined with ", ").
    expect(p.clientAddress('127.0.0.1', '198.51.100.7:51234')).toBe('198.51.100.7')
    expect(p.clientAddress('127.0.0.1', '[2001:db8::1]:443, 10.0.0.1')).toBe('2001:db8::1')
    expect(p.clientAddress('127.0.0.1', ' 2001:db8::2 ')).toBe('2001:db8::2')
    expect(p.clientAddress('::ffff:127.0.0.1', '198.51.100.7')).toBe('198.51.100.7')
    // No header: the peer.
    expect(p.clientAddress('127.0.0.1', null)).toBe('127.0.0.1')
  })

  test('a malformed header falls back to the peer', () => {
    const p = TrustedProxies.parse('127.0.0.1,10.0.0.0/8')
    for (const header of [
      '',
      ' ',
      'unknown',
      '198.51.100.7,',
      '198.51.100.7, garbage',
      '198.51.100.7, 10.0.0.1, <script>',
      '198.51.100.7;10.0.0.1',
      '300.1.1.1',
      '198.51.100.7:99999',
      'x'.repeat(8000),
    ])
      expect([header.slice(0, 40), p.clientAddress('127.0.0.1', header)]).toEqual([
        header.slice(0, 40),
        '127.0.0.1',
      ])
    // Garbage left of the client is the client's own business: the hop the proxy appended stands.
    expect(p.clientAddress('127.0.0.1', 'garbage, 198.51.100.7')).toBe('198.51.100.7')
  })
})
