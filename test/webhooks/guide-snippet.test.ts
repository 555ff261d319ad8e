import { expect, test } from 'bun:test'
import { createHmac, timingSafeEqual } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { sign } from '../../src/services/webhooks'

// docs/guide.md's "Webhooks" section verifies a signature "in a few lines": those lines, run as
// written, accept the server's signature and refuse a changed body or an old timestamp.

type Verify = (secret: string, headers: Headers, body: string) => boolean

function readmeVerify(): Verify {
  const guide = readFileSync(new URL('../../docs/guide.md', import.meta.url), 'utf8')
  const block = guide
    .split('```ts\n')
    .find((b) => b.includes('function verify('))!
    .split('```')[0]!
  const js = new Bun.Transpiler({ loader: 'ts' }).transformSync(block.replace(/^import .*$/m, ''))
  return new Function('createHmac', 'timingSafeEqual', `${js}; return verify`)(createHmac, timingSafeEqual)
}

test('the guide’s verification snippet accepts the server’s signature and nothing else', () => {
  const verify = readmeVerify()
  const secret = `whsec_${Buffer.alloc(24, 3).toString('base64')}`
  const ts = Math.floor(Date.now() / 1000)
  const body = '{"id":"msg_1","type":"batch.completed","created_at":1,"data":{"id":"batch_1"}}'
  const headers = (at: number, signature = sign(secret, 'msg_1', at, body)) =>
    new Headers({ 'webhook-id': 'msg_1', 'webhook-timestamp': String(at), 'webhook-signature': signature })
  expect(verify(secret, headers(ts), body)).toBe(true)
  expect(verify(secret, headers(ts), body.replace('completed', 'failed'))).toBe(false)
  expect(verify(secret, headers(ts - 600, sign(secret, 'msg_1', ts - 600, body)), body)).toBe(false)
  expect(verify(`whsec_${Buffer.alloc(24, 4).toString('base64')}`, headers(ts), body)).toBe(false)
})
