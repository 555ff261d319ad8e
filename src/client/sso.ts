import { type Api, Interrupted, type LoginAnswer } from './api'
import type { Env } from './config'
import { ClientError, EXIT } from './exit'
import type { View } from './view'

// `gridkeep login --sso` (docs/guide.md "Signing in with SSO"; docs/api.md §2 "Single sign-on"): the
// sign-in of a native app, RFC 8252. The client listens on a loopback address of a random port,
// sends the browser to the server's /v1/auth/oidc/start with that address and a PKCE challenge,
// and waits there for the server's redirect with a one-time code — sent once the person confirmed
// in the browser that this terminal may sign in as them — which it exchanges with its verifier for
// the login JWT. The address is always printed: it is what a person opens where no
// browser can be started (an SSH session), on this machine, since the loopback is this machine's.

/** As long as the server keeps a sign-in (docs/api.md §2): a person may need a while at the provider. */
const WAIT_MS = 10 * 60 * 1000

const b64url = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64url')
const random = (n: number) => b64url(crypto.getRandomValues(new Uint8Array(n)))
const s256 = (verifier: string) => new Bun.CryptoHasher('sha256').update(verifier).digest('base64url')

/** The sign-in through the browser; the login answer once the server vouched for it. */
export async function signInWithBrowser(api: Api, env: Env, view: View): Promise<LoginAnswer> {
  const verifier = random(32)
  const state = random(16)
  let arrived: (params: URLSearchParams) => void = () => {}
  const answer = new Promise<URLSearchParams>((resolve) => {
    arrived = resolve
  })
  const listener = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    fetch(req) {
      const url = new URL(req.url)
      if (url.pathname !== '/callback') return new Response('Not found', { status: 404 })
      arrived(url.searchParams)
      const error = url.searchParams.get('error_description') ?? url.searchParams.get('error')
      return page(
        error
          ? `The sign-in failed: ${error}`
          : 'Signed in. You may close this tab and go back to the terminal.',
      )
    },
  })
  try {
    const start = new URL(`${api.server}/v1/auth/oidc/start`)
    start.search = new URLSearchParams({
      redirect_uri: `http://127.0.0.1:${listener.port}/callback`,
      code_challenge: s256(verifier),
      code_challenge_method: 'S256',
      state,
    }).toString()
    view.event('sso_url', { url: start.href })
    view.say(`Sign in with your browser at:\n\n  ${start.href}\n`)
    if (!openBrowser(start.href, env))
      view.warn('No browser could be opened here: open the address above in a browser on this machine.')
    const params = await waitFor(answer, api.interrupt)
    if (params.get('state') !== state)
      throw new ClientError(
        EXIT.auth,
        'the sign-in answer did not carry this login’s state; run gridkeep login --sso again',
      )
    const error = params.get('error')
    // docs/api.md §2: the server's confirmation page answered Cancel.
    if (error === 'access_denied')
      throw new ClientError(
        EXIT.auth,
        'the sign-in was cancelled in the browser; run gridkeep login --sso again to sign in',
        { code: error },
      )
    if (error)
      throw new ClientError(
        EXIT.auth,
        `the sign-in was refused: ${params.get('error_description') ?? error}`,
        {
          code: error,
        },
      )
    return await api.json<LoginAnswer>('POST', '/v1/auth/oidc/token', {
      body: { code: params.get('code') ?? '', code_verifier: verifier },
    })
  } finally {
    // Not cut: the browser's page (which says how it ended) is answered before the client goes on.
    await listener.stop()
  }
}

function waitFor<T>(promise: Promise<T>, interrupt: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(
      () =>
        reject(
          new ClientError(EXIT.auth, 'no sign-in arrived within 10 minutes; run gridkeep login --sso again'),
        ),
      WAIT_MS,
    )
    const stop = () => reject(new Interrupted())
    interrupt.addEventListener('abort', stop, { once: true })
    promise.then(resolve, reject).finally(() => {
      clearTimeout(timer)
      interrupt.removeEventListener('abort', stop)
    })
  })
}

/**
 * Starts the person's browser: $BROWSER, else the platform's opener (xdg-open, open, start).
 * false when none could be started; the browser itself is left running.
 */
function openBrowser(url: string, env: Env): boolean {
  const command = env.BROWSER
    ? [env.BROWSER, url]
    : process.platform === 'darwin'
      ? ['open', url]
      : process.platform === 'win32'
        ? ['cmd', '/c', 'start', '""', url]
        : ['xdg-open', url]
  if (!Bun.which(command[0]!, { PATH: env.PATH ?? '' })) return false
  try {
    Bun.spawn(command, { stdin: 'ignore', stdout: 'ignore', stderr: 'ignore' }).unref()
    return true
  } catch {
    return false
  }
}

function page(words: string): Response {
  const text = words.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
  return new Response(
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>gridkeep</title></head><body><p>${text}</p></body></html>`,
    {
      headers: {
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': "default-src 'none'",
      },
    },
  )
}
