import { expect, test } from 'bun:test'
import { manualClock } from '../../src/lib/clock'
import { createTokens } from '../../src/lib/tokens'

// docs/api.md §1 login JWTs: a token whose signature was checked once is kept (the same token comes with
// every request), but only byte for byte, and never past its expiry.

const SECRET = 'tokens-test-secret-tokens-test-secret-0123'

test('a verified token keeps working until its exp, then is refused, kept or not', async () => {
  const clock = manualClock()
  const tokens = createTokens(SECRET, 60, clock)
  const { token } = await tokens.sign('user_1', 3)
  const claims = { sub: 'user_1', tv: 3, exp: clock.now() + 60, sso: false }
  expect(await tokens.verify(token)).toEqual(claims)
  clock.advance(59)
  expect(await tokens.verify(token)).toEqual(claims)
  clock.advance(1)
  expect(await tokens.verify(token)).toBeNull()
  expect(await tokens.verify(token)).toBeNull()
})

test('a single sign-on session says so in its token (docs/api.md §1)', async () => {
  const clock = manualClock()
  const tokens = createTokens(SECRET, 60, clock)
  const { token } = await tokens.sign('user_1', 3, { sso: true })
  expect(await tokens.verify(token)).toEqual({ sub: 'user_1', tv: 3, exp: clock.now() + 60, sso: true })
  expect((await tokens.verify((await tokens.sign('user_1', 3, { sso: false })).token))?.sso).toBe(false)
})

test('a kept token lends nothing to a token that differs from it: another signature, another secret', async () => {
  const clock = manualClock()
  const tokens = createTokens(SECRET, 60, clock)
  const { token } = await tokens.sign('user_1', 0)
  expect(await tokens.verify(token)).not.toBeNull()
  const [head, body, sig] = token.split('.') as [string, string, string]
  // The first character: all six of its bits are signature bits (the last one's low bits are padding,
  // which decoders ignore, so changing it may change nothing).
  const flipped = `${head}.${body}.${sig.startsWith('A') ? 'B' : 'A'}${sig.slice(1)}`
  expect(await tokens.verify(flipped)).toBeNull()
  const forged = await createTokens('another-secret-another-secret-0123456789', 60, clock).sign('user_1', 0)
  expect(await tokens.verify(forged.token)).toBeNull()
  // The kept one still works.
  expect((await tokens.verify(token))?.sub).toBe('user_1')
})
