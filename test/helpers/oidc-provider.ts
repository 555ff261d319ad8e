import { join } from 'node:path'
import { ownProcess } from './children'
import { rememberSecret } from './secrets'

// The tests' OpenID provider (docs/api.md §2 "Single sign-on"): oidc-provider in its own process
// (test/helpers/oidc-provider-main.ts), with gridkeep's client and the people of every SSO test:
//
//   alice  alice@lab.example, verified
//   victor victor@lab.example, NOT verified
//   ada    ada@lab.example, verified, in the group gridkeep-admins
//   otto   otto@elsewhere.example, verified (another domain)
//
// `signInAtProvider` walks its login and consent pages over HTTP as a browser would.

export const CLIENT_ID = 'gridkeep-test'
export const CLIENT_SECRET = 'gridkeep-test-client-secret'
// A credential like any other: the suite's end checks it never appeared in a log line.
rememberSecret(CLIENT_SECRET)
/** How long the provider's ID tokens are valid (their `exp` is this after their issue). */
export const ID_TOKEN_TTL_SECONDS = 600
export const ADMIN_GROUP = 'gridkeep-admins'
/** The callback of the in-process test apps (their PUBLIC_URL): the provider redirects there, the test follows. */
export const APP_PUBLIC_URL = 'http://gridkeep.test'

export const PEOPLE = {
  alice: { email: 'alice@lab.example', email_verified: true, name: 'Alice Verified', groups: [] as string[] },
  victor: {
    email: 'victor@lab.example',
    email_verified: false,
    name: 'Victor Unverified',
    groups: [] as string[],
  },
  ada: { email: 'ada@lab.example', email_verified: true, name: 'Ada Admin', groups: [ADMIN_GROUP] },
  otto: { email: 'otto@elsewhere.example', email_verified: true, name: 'Otto Other', groups: [] as string[] },
}

export interface TestProvider {
  issuer: string
  /** The key id the provider signs with now. */
  kid: string
  /** Adds callbacks the client may use, changes people's claims, or rotates the signing key. */
  configure(change: {
    redirect_uris?: string[]
    accounts?: Record<string, Record<string, unknown>>
    rotate?: boolean
  }): Promise<void>
  stop(): void
}

/**
 * A port free a moment ago, for a listening server whose PUBLIC_URL (the callback the provider
 * redirects to) must name its port before it starts.
 */
export function freePort(): number {
  const probe = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  return port
}

/** The settings of a gridkeep server signing in at `provider` (extra settings win). */
export const ssoEnv = (provider: { issuer: string }, extra: Record<string, string> = {}) => ({
  OIDC_ISSUER: provider.issuer,
  OIDC_CLIENT_ID: CLIENT_ID,
  OIDC_CLIENT_SECRET: CLIENT_SECRET,
  OIDC_NAME: 'Lab SSO',
  OIDC_SCOPES: 'openid email profile groups',
  PUBLIC_URL: APP_PUBLIC_URL,
  ...extra,
})

export async function startOidcProvider(
  redirectUris: string[] = [`${APP_PUBLIC_URL}/v1/auth/oidc/callback`],
) {
  const proc = ownProcess(
    Bun.spawn([process.execPath, join(import.meta.dir, 'oidc-provider-main.ts')], {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        OP_OPTIONS: JSON.stringify({
          client_id: CLIENT_ID,
          client_secret: CLIENT_SECRET,
          redirect_uris: redirectUris,
          accounts: PEOPLE,
          id_token_ttl: ID_TOKEN_TTL_SECONDS,
        }),
      },
      stdout: 'pipe',
      stderr: 'pipe',
    }),
  )
  const stderr = new Response(proc.stderr).text()
  const reader = proc.stdout.getReader()
  let text = ''
  while (!text.includes('\n')) {
    const { value, done } = await reader.read()
    if (done) throw new Error(`the OpenID provider did not start:\n${await stderr}`)
    text += new TextDecoder().decode(value)
  }
  reader.releaseLock()
  const started = JSON.parse(text.slice(0, text.indexOf('\n'))) as { issuer: string; kid: string }
  const provider: TestProvider = {
    issuer: started.issuer,
    kid: started.kid,
    async configure(change) {
      const res = await fetch(`${started.issuer}/__test/configure`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(change),
      })
      if (!res.ok) throw new Error(`configure failed: ${res.status}`)
      provider.kid = ((await res.json()) as { kid: string }).kid
    },
    stop: () => proc.kill('SIGKILL'),
  }
  return provider
}

/** Cookies per origin, as a browser keeps them (enough for the provider's and gridkeep's). */
export class CookieJar {
  private readonly cookies = new Map<string, Map<string, string>>()

  take(url: string, headers: Headers) {
    const origin = new URL(url).origin
    const jar = this.cookies.get(origin) ?? new Map<string, string>()
    for (const line of headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';')
      const [name, ...value] = pair!.trim().split('=')
      const expired = attributes.some((a) => /^\s*max-age=0\s*$/i.test(a)) || value.join('=') === ''
      if (expired) jar.delete(name!)
      else jar.set(name!, value.join('='))
    }
    this.cookies.set(origin, jar)
  }

  header(url: string): string {
    const jar = this.cookies.get(new URL(url).origin)
    return jar ? [...jar].map(([k, v]) => `${k}=${v}`).join('; ') : ''
  }

  get(url: string, name: string): string | undefined {
    return this.cookies.get(new URL(url).origin)?.get(name)
  }
}

/**
 * Follows the provider from its authorization URL through its login page (as `login`) and its
 * consent page, as a browser would, until it redirects outside itself: returns that address (the
 * callback with `code` and `state`, or an error).
 */
export async function signInAtProvider(
  authorizationUrl: string,
  login: string,
  jar: CookieJar = new CookieJar(),
): Promise<string> {
  const origin = new URL(authorizationUrl).origin
  let url = authorizationUrl
  let init: RequestInit = {}
  for (let step = 0; step < 20; step++) {
    const res = await fetch(url, {
      ...init,
      redirect: 'manual',
      headers: { ...(init.headers as Record<string, string>), cookie: jar.header(url) },
    })
    jar.take(url, res.headers)
    init = {}
    const location = res.headers.get('location')
    if (res.status >= 300 && res.status < 400 && location) {
      await res.body?.cancel()
      const next = new URL(location, url)
      if (next.origin !== origin) return next.href
      url = next.href
      continue
    }
    const html = await res.text()
    if (res.status !== 200)
      throw new Error(`the provider answered ${res.status} at ${url}:\n${html.slice(0, 2000)}`)
    const action = /<form[^>]*action="([^"]+)"/.exec(html)?.[1]
    const prompt = /name="prompt" value="([^"]+)"/.exec(html)?.[1]
    if (!action || !prompt) throw new Error(`no form on the provider's page ${url}:\n${html.slice(0, 2000)}`)
    const form = new URLSearchParams(
      prompt === 'login' ? { prompt, login, password: 'any-password' } : { prompt },
    )
    url = new URL(action.replaceAll('&amp;', '&'), url).href
    init = {
      method: 'POST',
      body: form.toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    }
  }
  throw new Error('the provider never redirected back')
}

/** Sends a request to gridkeep: an in-process app's handle, or fetch for a listening server. */
export type Send = (request: Request) => Promise<Response>

export interface Dance {
  /** The browser's cookies (gridkeep's gk_sso among them). */
  jar: CookieJar
  /** /v1/auth/oidc/start's answer. */
  start: Response
  /** Where the provider sent the browser back (the callback with code and state). */
  callback: string
  /**
   * The callback's answer: 302 to the dashboard's page, a terminal's page asking to confirm, 302
   * to a terminal's loopback with a refusal, or a refusal.
   */
  back: Response
}

/**
 * A browser's sign-in at `base` (gridkeep's public URL): start, the provider's pages as `login`,
 * the callback. The one-time code is not exchanged (see `exchange`).
 */
export async function dance(send: Send, base: string, login: string, query = ''): Promise<Dance> {
  const jar = new CookieJar()
  const start = await send(new Request(`${base}/v1/auth/oidc/start${query}`))
  if (start.status !== 302) throw new Error(`start answered ${start.status}: ${await start.text()}`)
  jar.take(base, start.headers)
  const callback = await signInAtProvider(start.headers.get('location')!, login, jar)
  const back = await send(new Request(callback, { headers: { cookie: jar.header(base) } }))
  jar.take(base, back.headers)
  // The state, the provider's code, the one-time code and the browser's cookie are credentials:
  // never in a log line.
  rememberSecret(jar.get(base, 'gk_sso'))
  const answer = new URL(callback).searchParams
  const location = back.headers.get('location') ?? ''
  for (const secret of [
    answer.get('state'),
    answer.get('code'),
    new URLSearchParams(location.slice(location.indexOf('#') + 1)).get('code'),
    location.startsWith('http') ? new URL(location).searchParams.get('code') : null,
  ])
    rememberSecret(secret)
  return { jar, start, callback, back }
}

/**
 * The person's answer, in the browser of a dance, to a terminal's sign-in ("A terminal is asking
 * to sign in as …"): the form's POST to /confirm or /cancel, with that browser's cookies.
 */
export async function answerTerminal(
  send: Send,
  base: string,
  d: Pick<Dance, 'jar'>,
  answer: 'confirm' | 'cancel',
  headers: Record<string, string> = {},
): Promise<Response> {
  const res = await send(
    new Request(`${base}/v1/auth/oidc/${answer}`, {
      method: 'POST',
      headers: { cookie: d.jar.header(base), ...headers },
    }),
  )
  const location = res.headers.get('location')
  if (location?.startsWith('http')) rememberSecret(new URL(location).searchParams.get('code'))
  return res
}

/** The dashboard's exchange of the one-time code in a dance's redirect (`/app/sso#code=…`). */
export async function exchange(send: Send, base: string, d: Dance): Promise<Response> {
  const location = d.back.headers.get('location') ?? ''
  const code = new URLSearchParams(location.slice(location.indexOf('#') + 1)).get('code')
  const body = JSON.stringify({ code })
  return send(
    new Request(`${base}/v1/auth/oidc/token`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'content-length': String(body.length),
        cookie: d.jar.header(base),
      },
      body,
    }),
  )
}
