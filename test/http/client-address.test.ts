import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestServer, type TestServer } from '../helpers/app'
import { auditEntries } from '../helpers/audit'
import { type MadeUser, makeSuperadmin, makeUser, uniqueEmail } from '../helpers/builders'

// The client's address behind a reverse proxy (TRUSTED_PROXIES, docs/deployment.md "The client's
// address behind a proxy"), over real connections from 127.0.0.1: what an audit entry records and what the
// login rate limit counts per address. From a peer that is not trusted X-Forwarded-For is never
// read; through a trusted one the rightmost address that is not a trusted proxy is the client; a
// header that cannot be read means the peer, never a 5xx.

let direct: TestServer
let proxied: TestServer
let directReader: MadeUser
let proxiedReader: MadeUser

beforeAll(async () => {
  ;[direct, proxied] = await Promise.all([
    // A proxy elsewhere is trusted; the test's own connections (127.0.0.1) are not.
    startTestServer({ TRUSTED_PROXIES: '10.0.0.0/8', RATE_LIMIT_LOGIN_PER_MINUTE: '1' }),
    // The test stands where nginx would: on 127.0.0.1, in front of the server, beside a second
    // trusted proxy further out (10.0.0.0/8).
    startTestServer({ TRUSTED_PROXIES: '127.0.0.1, 10.0.0.0/8', RATE_LIMIT_LOGIN_PER_MINUTE: '1' }),
  ])
  ;[directReader, proxiedReader] = await Promise.all([makeSuperadmin(direct), makeSuperadmin(proxied)])
})

afterAll(async () => {
  await Promise.all([direct?.stop(), proxied?.stop()])
})

/** A refused sign-in (an unknown email) from behind `forwardedFor`: its status and its entry's address. */
async function signIn(s: TestServer, reader: MadeUser, email: string, forwardedFor?: string) {
  const res = await s.req('POST', '/v1/auth/login', {
    headers: forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor },
    body: { email, password: 'not-the-password' },
  })
  const entries = (await auditEntries(s, reader, { action: 'auth.sign_in_failed' })).filter(
    (e) => e.details.email === email,
  )
  return { status: res.status, ips: entries.map((e) => e.ip) }
}

describe('from a peer that is not a trusted proxy', () => {
  test('a forged X-Forwarded-For is ignored: the entry names the peer', async () => {
    expect(await signIn(direct, directReader, uniqueEmail(), '203.0.113.9')).toEqual({
      status: 401,
      ips: ['127.0.0.1'],
    })
  })

  test('nor does it escape the login rate limit by naming another address each time', async () => {
    const email = uniqueEmail()
    expect(await signIn(direct, directReader, email, '203.0.113.1')).toEqual({
      status: 401,
      ips: ['127.0.0.1'],
    })
    // Refused by the limit: no entry (docs/api.md §17), whatever address the header names.
    expect(await signIn(direct, directReader, email, '203.0.113.2')).toEqual({
      status: 429,
      ips: ['127.0.0.1'],
    })
  })
})

describe('through a trusted proxy', () => {
  test('the rightmost address that is not a trusted proxy is the client', async () => {
    // 203.0.113.9 is what the client claimed; 198.51.100.7 is what the outer proxy (10.1.1.1) saw.
    expect(
      await signIn(proxied, proxiedReader, uniqueEmail(), '203.0.113.9, 198.51.100.7, 10.1.1.1'),
    ).toEqual({ status: 401, ips: ['198.51.100.7'] })
    // Without the header, the peer.
    expect(await signIn(proxied, proxiedReader, uniqueEmail())).toEqual({
      status: 401,
      ips: ['127.0.0.1'],
    })
  })

  test('every audited change records it, not only sign-ins', async () => {
    const user = await makeUser(proxied)
    const res = await proxied.req('POST', '/v1/users/me/api-keys', {
      token: user.token,
      headers: { 'x-forwarded-for': '2001:db8::7' },
      body: { name: 'laptop' },
    })
    expect(res.status).toBe(201)
    const [entry] = await auditEntries(proxied, proxiedReader, {
      action: 'key.personal.created',
      target_id: res.body.id,
    })
    expect(entry!.ip).toBe('2001:db8::7')
  })

  test('the login rate limit counts per client, not per proxy', async () => {
    const email = uniqueEmail()
    expect(await signIn(proxied, proxiedReader, email, '198.51.100.1')).toMatchObject({ status: 401 })
    // Another client behind the same proxy has its own allowance …
    expect(await signIn(proxied, proxiedReader, email, '198.51.100.2')).toEqual({
      status: 401,
      ips: ['198.51.100.2', '198.51.100.1'],
    })
    // … and the first one has used its own up.
    expect((await signIn(proxied, proxiedReader, email, '198.51.100.1')).status).toBe(429)
  })

  test('a malformed X-Forwarded-For falls back to the peer, never a 5xx', async () => {
    for (const header of ['unknown', '198.51.100.7, garbage', '198.51.100.7,', '::::', ' '])
      expect([header, await signIn(proxied, proxiedReader, uniqueEmail(), header)]).toEqual([
        header,
        { status: 401, ips: ['127.0.0.1'] },
      ])
  })
})
