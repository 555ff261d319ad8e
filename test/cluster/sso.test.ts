import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import {
  APP_PUBLIC_URL,
  CookieJar,
  exchange,
  signInAtProvider,
  ssoEnv,
  startOidcProvider,
  type TestProvider,
} from '../helpers/oidc-provider'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'

// docs/api.md §2 "Single sign-on", §12: behind a load balancer each step of a sign-in may reach
// another instance. The sign-in lives in the database, so it completes across instances and is
// still claimed once.

describeWith(postgres, 'single sign-on across two instances', () => {
  let provider: TestProvider
  let a: TestApp
  let b: TestApp
  beforeAll(async () => {
    provider = await startOidcProvider()
    const env = ssoEnv(provider, { DATABASE_URL: await freshPostgresUrl(), DATABASE_POOL_SIZE: '4' })
    a = makeTestApp(env)
    b = makeTestApp(env)
    await Promise.all([a.deps.store.ready(), b.deps.store.ready()])
  })
  afterAll(() => {
    a?.close()
    b?.close()
    provider?.stop()
  })

  test('started on one instance, called back on the other, exchanged on the first; a replay on either is refused', async () => {
    const jar = new CookieJar()
    const start = await a.app.handle(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))
    expect(start.status).toBe(302)
    jar.take(APP_PUBLIC_URL, start.headers)
    const callback = await signInAtProvider(start.headers.get('location')!, 'alice')
    const cookie = { headers: { cookie: jar.header(APP_PUBLIC_URL) } }
    const back = await b.app.handle(new Request(callback, cookie))
    expect(back.status).toBe(302)
    for (const instance of [a, b]) {
      const replay = await instance.app.handle(new Request(callback, cookie))
      expect(replay.status).toBe(400)
      expect(((await replay.json()) as any).error.code).toBe('invalid_state')
    }
    const send = (r: Request) => a.app.handle(r)
    const session = await exchange(send, APP_PUBLIC_URL, { jar, start, callback, back })
    expect(session.status).toBe(200)
    const token = ((await session.json()) as any).access_token
    expect((await b.req('GET', '/v1/auth/me', { token })).body.email).toBe('alice@lab.example')
    const again = await exchange((r) => b.app.handle(r), APP_PUBLIC_URL, { jar, start, callback, back })
    expect(again.status).toBe(400)
  })
})
