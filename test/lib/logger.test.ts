import { afterEach, describe, expect, test } from 'bun:test'
import { log, scrubString, setLogLevel, setLogSink } from '../../src/lib/logger'

let restore: (() => void) | undefined
afterEach(() => {
  restore?.()
  setLogLevel('debug')
})

function capture() {
  const lines: any[] = []
  restore = setLogSink((l) => lines.push(JSON.parse(l)))
  return lines
}

describe('logger', () => {
  test('writes one JSON object per line with ts, level, msg and fields', () => {
    const lines = capture()
    log.child({ request_id: 'r1' }).info('hello', { n: 1 })
    expect(lines).toEqual([{ ts: expect.any(String), level: 'info', msg: 'hello', request_id: 'r1', n: 1 }])
  })

  test('honours the level', () => {
    const lines = capture()
    setLogLevel('warn')
    log.info('quiet')
    log.warn('loud')
    expect(lines.map((l) => l.msg)).toEqual(['loud'])
  })

  test('redacts secret-named fields at any depth', () => {
    const lines = capture()
    log.info('x', {
      password: 'p@ss',
      nested: { access_token: 'abc', api_key: 'k', authorization: 'Bearer z', keep: 'visible' },
      token: 'tok',
      must_change_password: true,
    })
    expect(lines[0]).toMatchObject({
      password: '[redacted]',
      token: '[redacted]',
      nested: {
        access_token: '[redacted]',
        api_key: '[redacted]',
        authorization: '[redacted]',
        keep: 'visible',
      },
      must_change_password: true,
    })
  })

  test('masks raw keys, JWTs and URL credentials inside any string', () => {
    const key = `gk-${'a1B2'.repeat(10)}`
    const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyXzEyMyJ9.c2lnbmF0dXJl'
    const out = scrubString(`key ${key} jwt ${jwt} smtp smtp://mailer:hunter22@mail.lab:587`)
    expect(out).not.toContain(key)
    expect(out).toContain(key.slice(0, 12))
    expect(out).not.toContain(jwt)
    expect(out).not.toContain('hunter22')
    expect(out).toContain('smtp://[redacted]@mail.lab:587')
    const lines = capture()
    log.error(`failed with ${key}`, { error: new Error(`bad ${jwt}`) })
    expect(JSON.stringify(lines)).not.toContain(key)
    expect(JSON.stringify(lines)).not.toContain(jwt)
  })
})
