import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { createUser } from '../../src/modules/users/service'
import { startTestServer, type TestServer } from '../helpers/app'
import { ownProcess } from '../helpers/children'
import {
  answerTerminal,
  CookieJar,
  freePort,
  PEOPLE,
  signInAtProvider,
  ssoEnv,
  startOidcProvider,
  type TestProvider,
} from '../helpers/oidc-provider'
import { until } from '../helpers/until'

// `gridkeep login --sso` end to end (docs/guide.md "Signing in with SSO"): the terminal client in a
// place with no browser (no opener on its PATH), so it prints the address; the test is the person
// who opens it, walks the provider's pages, and is sent back to the client's loopback listener.

const CLI = resolve(import.meta.dir, '../../src/cli.ts')
const dir = mkdtempSync(join(tmpdir(), 'gk-sso-client-'))
let homes = 0

let provider: TestProvider
let server: TestServer
beforeAll(async () => {
  provider = await startOidcProvider()
  const port = freePort()
  const url = `http://127.0.0.1:${port}`
  await provider.configure({ redirect_uris: [`${url}/v1/auth/oidc/callback`] })
  server = await startTestServer(
    ssoEnv(provider, { PORT: String(port), PUBLIC_URL: url, OIDC_ALLOWED_DOMAINS: 'lab.example' }),
  )
})
afterAll(async () => {
  await server?.stop()
  provider?.stop()
  rmSync(dir, { recursive: true, force: true })
})

/** `gridkeep login --sso` as its own process, with no browser opener on its PATH. */
function loginSso() {
  const home = join(dir, `home-${++homes}`)
  const noBrowser = join(home, 'bin')
  mkdirSync(noBrowser, { recursive: true })
  const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), PATH: noBrowser }
  const proc = ownProcess(
    Bun.spawn([process.execPath, CLI, 'login', '--sso', '--server', server.url, '--name', 'sso-terminal'], {
      env,
      stdin: 'ignore',
      stdout: 'pipe',
      stderr: 'pipe',
    }),
  )
  const stderr = new Response(proc.stderr).text()
  let stdout = ''
  const reading = (async () => {
    const decoder = new TextDecoder()
    for await (const chunk of proc.stdout) stdout += decoder.decode(chunk, { stream: true })
  })()
  const lines = () =>
    stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l))
  return {
    env,
    /** The address the client printed (as a JSON event on stdout; in words on stderr). */
    async url(): Promise<string> {
      const line = await until('the sign-in address', () => lines().find((l) => l.event === 'sso_url'))
      return line.url
    },
    async done() {
      const code = await proc.exited
      await reading
      return { code, lines: lines(), stderr: await stderr }
    },
  }
}

/**
 * The person at the browser: opens the address, signs in at the provider as `login`, follows back;
 * asked whether a terminal may sign in as them, gives `answer`, and follows to the loopback.
 */
async function openInBrowser(
  url: string,
  login: string,
  answer: 'confirm' | 'cancel' = 'confirm',
): Promise<string> {
  const jar = new CookieJar()
  const start = await fetch(url, { redirect: 'manual' })
  expect(start.status).toBe(302)
  jar.take(url, start.headers)
  const callback = await signInAtProvider(start.headers.get('location')!, login)
  let back = await fetch(callback, { redirect: 'manual', headers: { cookie: jar.header(callback) } })
  if (back.status === 200) {
    expect(await back.text()).toMatch(/A terminal is asking to sign in as [^<@]+@lab\.example/)
    back = await answerTerminal((r) => fetch(r, { redirect: 'manual' }), server.url, { jar }, answer, {
      origin: server.url,
    })
    expect(back.status).toBe(303)
  } else expect(back.status).toBe(302)
  // The server sends the browser to the client's loopback listener, which answers a page.
  const loopback = back.headers.get('location')!
  expect(loopback).toStartWith('http://127.0.0.1:')
  const page = await fetch(loopback)
  expect(page.status).toBe(200)
  return page.text()
}

describe('gridkeep login --sso', () => {
  test('prints the address where no browser opens; after the sign-in, a personal key is saved and works', async () => {
    const run = loginSso()
    const url = await run.url()
    expect(url).toStartWith(`${server.url}/v1/auth/oidc/start?redirect_uri=http%3A%2F%2F127.0.0.1%3A`)
    expect(new URL(url).searchParams.get('code_challenge_method')).toBe('S256')
    expect(await openInBrowser(url, 'alice')).toContain('Signed in')
    const { code, lines, stderr } = await run.done()
    expect(stderr).toContain('No browser could be opened here')
    expect(stderr).toContain(url)
    expect(code).toBe(0)
    expect(lines.find((l) => l.event === 'login')).toMatchObject({
      email: PEOPLE.alice.email,
      key_name: 'sso-terminal',
    })
    const saved = JSON.parse(readFileSync(join(run.env.XDG_CONFIG_HOME, 'gridkeep', 'config.json'), 'utf8'))
    expect(saved).toMatchObject({ server: server.url, email: PEOPLE.alice.email, key_name: 'sso-terminal' })
    expect((await server.req('GET', '/v1/batches', { token: saved.api_key })).status).toBe(200)
  })

  test('an account with a first password still to change gets its key all the same (docs/api.md §1)', async () => {
    const email = `pending-${crypto.randomUUID().slice(0, 8)}@lab.example`
    await createUser(
      server.deps,
      { email, full_name: 'Pending', password: 'temporary-pass-1', must_change_password: true },
      SYSTEM_AUDIT,
    )
    await provider.configure({ accounts: { pending: { email, email_verified: true, name: 'Pending' } } })
    const run = loginSso()
    expect(await openInBrowser(await run.url(), 'pending')).toContain('Signed in')
    const { code, stderr } = await run.done()
    expect(stderr).not.toContain('must change its password')
    expect(code).toBe(0)
    const saved = JSON.parse(readFileSync(join(run.env.XDG_CONFIG_HOME, 'gridkeep', 'config.json'), 'utf8'))
    expect(saved.email).toBe(email)
    expect((await server.req('GET', '/v1/batches', { token: saved.api_key })).status).toBe(200)
  })

  test('Cancel on the confirmation page ends the client with exit 4, and saves nothing', async () => {
    const run = loginSso()
    expect(await openInBrowser(await run.url(), 'alice', 'cancel')).toContain('The sign-in failed')
    const { code, stderr, lines } = await run.done()
    expect(code).toBe(4)
    expect(stderr).toContain('the sign-in was cancelled in the browser')
    expect(lines.find((l) => l.event === 'login')).toBeUndefined()
  })

  test('a sign-in the server refuses ends the client with the reason and exit 4, and saves nothing', async () => {
    const run = loginSso()
    expect(await openInBrowser(await run.url(), 'otto')).toContain('The sign-in failed')
    const { code, stderr, lines } = await run.done()
    expect(code).toBe(4)
    expect(stderr).toContain('elsewhere.example')
    expect(lines.find((l) => l.event === 'login')).toBeUndefined()
  })
})
