import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { auditContext } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import { jsonBody, optionalJsonBody } from '../../http/parse'
import { AppError, envelope } from '../../lib/errors'
import { KeyModel } from '../keys/model'
import { regenerateKey } from '../keys/service'
import { AuthModel, SsoModel } from './model'
import type { OidcState } from './oidc'
import * as auth from './service'
import * as sso from './sso'

const tags = ['auth']

export const authRoutes = (deps: Deps & CredentialState & OidcState) =>
  new Elysia({ name: 'routes.auth', prefix: '/v1/auth' })
    .use(authPlugin(deps))
    .post('/signup', ({ body, request, server }) => auth.signup(deps, body, auditContext(request, server)), {
      public: true,
      ...jsonBody(AuthModel.signup),
      detail: { tags, summary: 'Register; creates the user and their Personal Org' },
    })
    .post('/login', ({ body, request, server }) => auth.login(deps, body, auditContext(request, server)), {
      public: true,
      ...jsonBody(AuthModel.login),
      detail: { tags, summary: 'Log in; returns a JWT' },
    })
    .get('/me', ({ principal }) => auth.me(deps, principal), {
      session: true,
      detail: { tags, summary: 'Current profile and org memberships' },
    })
    .post(
      '/change-password',
      ({ body, principal, request, server }) =>
        auth.changePassword(deps, principal, body, auditContext(request, server)),
      {
        session: true,
        ...jsonBody(AuthModel.changePassword),
        detail: { tags, summary: 'Change the password; returns a fresh JWT' },
      },
    )
    .post(
      '/forgot-password',
      async ({ body, status }) => status(202, await auth.forgotPassword(deps, body)),
      {
        public: true,
        ...jsonBody(AuthModel.forgotPassword),
        detail: { tags, summary: 'Mail a password reset token (always 202)' },
      },
    )
    .post(
      '/reset-password',
      ({ body, request, server }) => auth.resetPassword(deps, body, auditContext(request, server)),
      {
        public: true,
        ...jsonBody(AuthModel.resetPassword),
        detail: { tags, summary: 'Redeem a reset token' },
      },
    )
    .post(
      '/api-keys/regenerate',
      async ({ body, principal, status, request, server }) =>
        status(
          201,
          await regenerateKey(
            deps,
            { type: 'personal', userId: principal.user.id },
            principal,
            body?.key_id,
            auditContext(request, server),
          ),
        ),
      {
        user: true,
        ...optionalJsonBody(KeyModel.regenerate),
        detail: { tags, summary: "Regenerate the caller's personal key" },
      },
    )
    .get('/methods', () => sso.signInMethods(deps), {
      public: true,
      response: SsoModel.methods,
      detail: { tags, summary: 'How one signs in here: password, single sign-on (and its name)' },
    })
    .get(
      '/oidc/start',
      ({ query, request, server }) =>
        inBrowser(request, async () => {
          const { location, browser } = await sso.startSignIn(deps, query, auditContext(request, server))
          return redirect(location, ssoCookie(deps, browser, sso.SSO_LOGIN_TTL_SECONDS))
        }),
      {
        public: true,
        query: SsoModel.start,
        detail: {
          tags,
          summary: 'Start a sign-in at the identity provider (a browser navigation; 302 to the provider)',
        },
      },
    )
    .get(
      '/oidc/callback',
      ({ request, server }) =>
        inBrowser(request, async () => {
          const answer = await sso.finishSignIn(
            deps,
            new URL(request.url).searchParams,
            readSsoCookie(request),
            auditContext(request, server),
          )
          return 'redirect' in answer ? redirect(answer.redirect) : confirmPage(answer.confirm)
        }),
      {
        public: true,
        query: SsoModel.callback,
        detail: {
          tags,
          summary:
            "The identity provider's answer (the redirect URI to register); 302 to the dashboard with a one-time code, or, for a terminal, a page asking the person to confirm",
        },
      },
    )
    .post(
      '/oidc/confirm',
      ({ request }) =>
        inBrowser(request, async () =>
          seeOther(
            await sso.answerTerminal(deps, true, readSsoCookie(request), request.headers.get('origin')),
          ),
        ),
      {
        public: true,
        detail: {
          tags,
          summary:
            "A terminal's sign-in confirmed in the browser (the form of the callback's page); 303 to the terminal's loopback with a one-time code",
        },
      },
    )
    .post(
      '/oidc/cancel',
      ({ request }) =>
        inBrowser(request, async () =>
          seeOther(
            await sso.answerTerminal(deps, false, readSsoCookie(request), request.headers.get('origin')),
          ),
        ),
      {
        public: true,
        detail: {
          tags,
          summary:
            "A terminal's sign-in cancelled in the browser; 303 to the terminal's loopback with error=access_denied",
        },
      },
    )
    .post(
      '/oidc/token',
      async ({ body, request, server, set }) => {
        const answer = await sso.redeemCode(deps, body, readSsoCookie(request), auditContext(request, server))
        set.headers['set-cookie'] = ssoCookie(deps, '', 0)
        return answer
      },
      {
        public: true,
        ...jsonBody(SsoModel.token),
        detail: { tags, summary: 'Exchange the one-time code of a sign-in for the login JWT' },
      },
    )

const redirect = (location: string, cookie?: string) =>
  new Response(null, {
    status: 302,
    headers: { location, 'cache-control': 'no-store', ...(cookie ? { 'set-cookie': cookie } : {}) },
  })

/** The answer to a terminal's confirmation: the form's POST becomes a GET of the loopback. */
const seeOther = (location: string) =>
  new Response(null, {
    status: 303,
    headers: { location, 'cache-control': 'no-store', 'set-cookie': CLEARED_COOKIE },
  })

const CLEARED_COOKIE = `${sso.SSO_COOKIE}=; Path=/v1/auth/oidc; Max-Age=0; HttpOnly; SameSite=Lax`

/**
 * docs/api.md §2: the cookie that ties a sign-in to the browser that started it. SameSite=Lax: the
 * provider's redirect back is a top-level navigation from another site, which Lax lets through.
 */
function ssoCookie(deps: Deps, value: string, maxAge: number): string {
  const secure = deps.config.PUBLIC_URL.startsWith('https:') ? '; Secure' : ''
  return `${sso.SSO_COOKIE}=${value}; Path=/v1/auth/oidc; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${secure}`
}

function readSsoCookie(request: Request): string | undefined {
  for (const part of (request.headers.get('cookie') ?? '').split(';')) {
    const [name, ...value] = part.trim().split('=')
    if (name === sso.SSO_COOKIE) return value.join('=') || undefined
  }
  return undefined
}

/**
 * The start and the callback are where a browser goes, not a script: a refusal is a page in words
 * for a browser (it asks for text/html), the envelope for anyone else.
 */
async function inBrowser(request: Request, answer: () => Promise<Response>): Promise<Response> {
  try {
    return await answer()
  } catch (error) {
    if (!(error instanceof AppError) || !(request.headers.get('accept') ?? '').includes('text/html'))
      throw error
    return new Response(errorPage(error), {
      status: error.status,
      headers: {
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
        'cache-control': 'no-store',
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
        'set-cookie': CLEARED_COOKIE,
        ...error.headers,
      },
    })
  }
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

function errorPage(error: AppError): string {
  const { message, code } = envelope(error).error
  return [
    '<!doctype html>',
    '<html lang="en"><head><meta charset="utf-8"><title>Sign-in failed · gridkeep</title></head>',
    '<body><main>',
    '<h1>Sign-in failed</h1>',
    `<p>${escapeHtml(message)}</p>`,
    `<p><small>${error.status} ${escapeHtml(code ?? '')}</small></p>`,
    '<p><a href="/">Back to sign-in</a></p>',
    '</main></body></html>',
  ].join('\n')
}

/**
 * docs/api.md §2: before a terminal's one-time code goes to its loopback, the person says yes. The
 * form posts with no body: the gk_sso cookie names the sign-in, so nothing of it is in the page.
 * No script runs here; no other site may frame it (a click on Continue is the person's own).
 * Referrer-Policy same-origin: the form's POST carries this server's Origin, which confirm checks.
 */
function confirmPage(ask: { email: string; loopback: string }): Response {
  const page = [
    '<!doctype html>',
    '<html lang="en"><head><meta charset="utf-8"><title>Confirm the sign-in · gridkeep</title></head>',
    '<body><main>',
    `<h1>A terminal is asking to sign in as ${escapeHtml(ask.email)}</h1>`,
    `<p>The program listening at ${escapeHtml(ask.loopback)} on this computer will get a session as ${escapeHtml(ask.email)}.</p>`,
    '<p>Continue only if you just ran <code>gridkeep login --sso</code> here. If you did not, cancel: someone may be trying to get into your account.</p>',
    '<form method="post" action="/v1/auth/oidc/confirm">',
    '<button type="submit">Continue</button>',
    '<button type="submit" formaction="/v1/auth/oidc/cancel">Cancel</button>',
    '</form>',
    '</main></body></html>',
  ].join('\n')
  return new Response(page, {
    status: 200,
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
      'x-frame-options': 'DENY',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'same-origin',
    },
  })
}
