import * as oidc from 'openid-client'
import { ConfigError, listSetting } from '../../config'
import type { UserRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { AuditContext, SignInRefusal } from '../../domain/audit'
import {
  checkCallback,
  checkCodeChallenge,
  checkLoopbackRedirect,
  checkReturnTo,
  domainAllowed,
  planSsoSignIn,
  type SsoClaims,
} from '../../domain/sso-rules'
import { type CredentialState, credentialsChanged } from '../../http/credential-cache'
import { AppError, badRequest, forbidden, notFound } from '../../lib/errors'
import { constantTimeEqual, generateResetToken, sha256Hex } from '../../lib/keys'
import { log } from '../../lib/logger'
import type { Identity } from '../../store/sso'
import { createUser } from '../users/service'
import type { IdentityProvider, OidcState } from './oidc'
import { issueSession, signInRefused } from './service'

// Single sign-on (docs/api.md §2 "Single sign-on"): the authorization code flow with PKCE, state and
// nonce, from the dashboard or from `gridkeep login --sso` (RFC 8252: a loopback redirect with
// PKCE). The sign-in's state lives in the store, claimed once (any instance may serve the
// callback), and is tied to the browser that started it by an HttpOnly cookie holding a random
// value of its own (the state travels in URLs, which proxies log; the cookie's value never does).
// The callback ends in a one-time code that the dashboard (holding that cookie) or the terminal
// (holding its PKCE verifier) exchanges for the login JWT, through the same issueSession as a
// password login. A terminal's code goes to its loopback only once the person said yes in the
// browser (a POST that carries the cookie): a link that starts a sign-in for someone else's
// listener on a shared machine gets nowhere without it.

/** How long a person has at the provider (typing a password, a second factor). */
export const SSO_LOGIN_TTL_SECONDS = 600
/** How long the one-time code lives between the callback's redirect and its exchange. */
export const SSO_CODE_TTL_SECONDS = 60
/** The cookie tying a sign-in to the browser that started it (a random value, stored hashed). */
export const SSO_COOKIE = 'gk_sso'
/** The dashboard's page that exchanges the one-time code (docs/api.md §11). */
export const SSO_PAGE = '/app/sso'

type SsoDeps = Deps & OidcState & CredentialState

export const callbackUrl = (deps: Deps) => `${deps.config.PUBLIC_URL}/v1/auth/oidc/callback`

function providerOf(deps: SsoDeps): IdentityProvider {
  if (!deps.identityProvider)
    throw notFound('sso_not_configured', 'Single sign-on is not configured on this server (OIDC_ISSUER)')
  return deps.identityProvider
}

/** GET /v1/auth/methods: how one may sign in here (the dashboard's sign-in page reads it). */
export function signInMethods(deps: SsoDeps) {
  return {
    object: 'auth.methods' as const,
    password: deps.config.PASSWORD_LOGIN,
    signup: deps.config.PASSWORD_LOGIN && deps.config.SIGNUP_ENABLED,
    sso: deps.identityProvider ? { name: deps.config.OIDC_NAME, start_url: '/v1/auth/oidc/start' } : null,
  }
}

export interface StartQuery {
  return_to?: string
  redirect_uri?: string
  code_challenge?: string
  code_challenge_method?: string
  state?: string
}

/**
 * GET /v1/auth/oidc/start: a new sign-in, stored; answers where to send the browser (the provider)
 * and the value of the browser's cookie.
 */
export async function startSignIn(
  deps: SsoDeps,
  query: StartQuery,
  audit: AuditContext,
): Promise<{ location: string; browser: string }> {
  const provider = providerOf(deps)
  const terminal = query.redirect_uri !== undefined
  if (terminal && query.return_to !== undefined)
    throw badRequest(
      'invalid_value',
      'return_to is for the dashboard; a terminal gives redirect_uri',
      'return_to',
    )
  const redirectUri = terminal ? checkLoopbackRedirect(query.redirect_uri!) : null
  const codeChallenge = terminal
    ? checkCodeChallenge(query.code_challenge, query.code_challenge_method)
    : null
  if (!terminal && (query.code_challenge !== undefined || query.state !== undefined))
    throw badRequest(
      'invalid_value',
      'code_challenge and state come with a terminal’s redirect_uri',
      query.code_challenge !== undefined ? 'code_challenge' : 'state',
    )
  const returnTo = terminal ? null : checkReturnTo(query.return_to)
  await limitStarts(deps, audit.ip)
  const state = oidc.randomState()
  const browser = oidc.randomState()
  const nonce = oidc.randomNonce()
  const codeVerifier = oidc.randomPKCECodeVerifier()
  const location = await provider.authorizationUrl({
    redirectUri: callbackUrl(deps),
    state,
    nonce,
    codeChallenge: await oidc.calculatePKCECodeChallenge(codeVerifier),
  })
  const now = deps.clock.now()
  await deps.store.sso.startLogin({
    state_hash: sha256Hex(state),
    nonce,
    code_verifier: codeVerifier,
    return_to: returnTo,
    redirect_uri: redirectUri,
    client_state: terminal ? (query.state ?? null) : null,
    code_challenge: codeChallenge,
    browser_hash: sha256Hex(browser),
    created_at: now,
    expires_at: now + SSO_LOGIN_TTL_SECONDS,
  })
  return { location, browser }
}

/**
 * docs/api.md §3 rate limits: each start stores a sign-in for anyone who asks, so the starts of one
 * client address are limited (RATE_LIMIT_SSO_PER_MINUTE), before the provider is asked or a row
 * written.
 */
async function limitStarts(deps: SsoDeps, ip: string | null) {
  try {
    await deps.store.limits.take('sso_start', ip ?? 'local', deps.config.RATE_LIMIT_SSO_PER_MINUTE, 60)
  } catch (error) {
    if (!(error instanceof AppError) || error.status !== 429) throw error
    const wait = error.headers['retry-after']
    throw new AppError(
      429,
      'rate_limit_exceeded',
      `Too many sign-ins were started from this address in the last minute; try again in ${wait} s`,
      null,
      error.headers,
    )
  }
}

const invalidState = (why: string) => badRequest('invalid_state', `${why}; start the sign-in again`, 'state')

/** Where the callback sends the browser, or the question it asks first (a terminal's sign-in). */
export type CallbackAnswer = { redirect: string } | { confirm: { email: string; loopback: string } }

/**
 * GET /v1/auth/oidc/callback: the provider's answer. The sign-in is claimed by its state (once, in
 * the browser that started it), the code redeemed and the ID token checked, the account found,
 * linked or created. The dashboard's sign-in goes on to its page with a one-time code; a
 * terminal's waits for the person's confirmation (confirmSignIn). Once the sign-in is known to be
 * a terminal's, a refusal goes to its loopback (RFC 6749 §4.1.2.1), so that the terminal can say why.
 */
export async function finishSignIn(
  deps: SsoDeps,
  query: URLSearchParams,
  cookie: string | undefined,
  audit: AuditContext,
): Promise<CallbackAnswer> {
  const provider = providerOf(deps)
  const state = checkCallback(query, true)
  if (!cookie) throw invalidState('This sign-in was not started in this browser, or its cookie has expired')
  const login = await deps.store.sso.takeLogin(sha256Hex(state), sha256Hex(cookie), deps.clock.now())
  if (!login)
    throw invalidState(
      'This sign-in is unknown, was used already, has expired, or was started in another browser',
    )
  try {
    checkCallback(query)
    const claims = await provider.redeem(new URL(`${callbackUrl(deps)}?${query}`), {
      state,
      nonce: login.nonce,
      codeVerifier: login.code_verifier,
    })
    const user = await admitIdentity(deps, provider.issuer, claims, audit)
    if (login.redirect_uri) {
      await deps.store.sso.grantCode(login.state_hash, user.id, null)
      return { confirm: { email: user.email, loopback: new URL(login.redirect_uri).host } }
    }
    const code = generateResetToken()
    await deps.store.sso.grantCode(login.state_hash, user.id, {
      hash: sha256Hex(code),
      expires_at: deps.clock.now() + SSO_CODE_TTL_SECONDS,
    })
    const fragment = new URLSearchParams({ code, return_to: login.return_to ?? '/app/batches' })
    return { redirect: `${SSO_PAGE}#${fragment}` }
  } catch (error) {
    // A refusal or an unreachable provider (502) is the terminal's to report; a bug (500) is not.
    if (login.redirect_uri && error instanceof AppError && error.status !== 500)
      return {
        redirect: loopback(login.redirect_uri, {
          error: error.errorCode ?? 'sso_failed',
          error_description: error.message,
          state: login.client_state,
        }),
      }
    throw error
  }
}

const nothingWaits = () =>
  badRequest(
    'invalid_state',
    'No sign-in of a terminal waits for confirmation in this browser: it was answered already or has expired; start it again',
  )

/**
 * POST /v1/auth/oidc/confirm and /cancel: the person's answer to "a terminal is asking to sign in"
 * (docs/api.md §2). The cookie names the sign-in and is the proof that the answer comes from the
 * browser that signed in at the provider: SameSite=Lax keeps it off another site's POST, and an
 * Origin other than this server's is refused. Confirmed, the terminal's loopback gets the one-time
 * code; cancelled, the sign-in is deleted and the loopback told `access_denied`.
 */
export async function answerTerminal(
  deps: SsoDeps,
  confirmed: boolean,
  cookie: string | undefined,
  origin: string | null,
): Promise<string> {
  providerOf(deps)
  if (origin !== null && origin !== new URL(deps.config.PUBLIC_URL).origin)
    throw forbidden('cross_site_request', 'This answer did not come from a page of this server')
  if (!cookie) throw nothingWaits()
  const now = deps.clock.now()
  if (!confirmed) {
    const login = await deps.store.sso.cancelLogin(sha256Hex(cookie), now)
    if (!login?.redirect_uri) throw nothingWaits()
    return loopback(login.redirect_uri, {
      error: 'access_denied',
      error_description: 'The sign-in was cancelled in the browser',
      state: login.client_state,
    })
  }
  const code = generateResetToken()
  const login = await deps.store.sso.confirmLogin(
    sha256Hex(cookie),
    { hash: sha256Hex(code), expires_at: now + SSO_CODE_TTL_SECONDS },
    now,
  )
  if (!login?.redirect_uri) throw nothingWaits()
  return loopback(login.redirect_uri, { code, state: login.client_state })
}

function loopback(redirectUri: string, params: Record<string, string | null>): string {
  const url = new URL(redirectUri)
  for (const [k, v] of Object.entries(params)) if (v !== null) url.searchParams.set(k, v)
  return url.href
}

/** The refusals of src/domain/sso-rules.ts that the audit log records (docs/api.md §17). */
const REFUSALS = new Set<SignInRefusal>([
  'account_disabled',
  'email_domain_not_allowed',
  'email_not_verified',
  'email_required',
])

/**
 * The account a sign-in reaches (src/domain/sso-rules.ts decides; this applies it): the linked one,
 * one linked now through its verified email, or a new one with its Personal Org.
 */
async function admitIdentity(
  deps: SsoDeps,
  issuer: string,
  claims: SsoClaims,
  audit: AuditContext,
): Promise<UserRow> {
  const policy = {
    allowedDomains: listSetting(deps.config.OIDC_ALLOWED_DOMAINS).map((d) => d.toLowerCase()),
    adminGroups: listSetting(deps.config.OIDC_ADMIN_GROUPS),
  }
  if (policy.adminGroups.length > 0 && claims.groups === undefined) providerOf(deps).noGroupsClaim()
  const linked = await deps.store.sso.findLinkedUser(issuer, claims.subject)
  const email = claims.email?.trim().toLowerCase()
  const byEmail = linked || !email ? undefined : await deps.store.accounts.findUserByEmail(email)
  let plan: ReturnType<typeof planSsoSignIn>
  try {
    plan = planSsoSignIn(claims, policy, linked, byEmail)
  } catch (error) {
    // docs/api.md §17: the rules' refusals are recorded, naming the account they kept the identity
    // out of (a deactivated one, or the one whose email the provider has not verified).
    if (error instanceof AppError && REFUSALS.has(error.errorCode as SignInRefusal))
      await signInRefused(deps, audit, email ?? null, linked ?? byEmail, error.errorCode as SignInRefusal, {
        method: 'sso',
        issuer,
      })
    throw error
  }
  const now = deps.clock.now()
  const identity: Identity = { issuer, subject: claims.subject, email: email ?? null }
  switch (plan.kind) {
    case 'sign_in': {
      const user = await deps.store.sso.recordSignIn(issuer, claims.subject, now, plan.role, audit)
      // Unlinked between the two reads (the account was deleted): as if it had never been.
      if (!user) throw invalidState('This account changed during the sign-in')
      return roleHolds(deps, plan.user, user)
    }
    case 'link':
      log.info('linked identity', { user_id: plan.user.id, issuer })
      return roleHolds(
        deps,
        plan.user,
        await deps.store.sso.link(plan.user.id, identity, now, plan.role, audit),
      )
    case 'create':
      return createUser(
        deps,
        { email: plan.email, full_name: plan.full_name, platform_role: plan.role, identity },
        audit,
      )
  }
}

/**
 * docs/api.md §1: a role OIDC_ADMIN_GROUPS changed is a change of credentials (the store bumped the
 * token version): the user as kept by every instance is forgotten, so the older JWTs stop working
 * and the session about to be issued is not refused by a kept row.
 */
function roleHolds(deps: SsoDeps, before: UserRow, after: UserRow): UserRow {
  if (after.token_version !== before.token_version) credentialsChanged(deps, [after.id])
  return after
}

/**
 * POST /v1/auth/oidc/token: the one-time code for the login answer, once. A terminal's code needs
 * its PKCE verifier; the dashboard's, the cookie of the browser that started the sign-in.
 */
export async function redeemCode(
  deps: SsoDeps,
  input: { code: string; code_verifier?: string },
  cookie: string | undefined,
  audit: AuditContext,
) {
  providerOf(deps)
  const invalid = (why: string) => badRequest('invalid_code', `${why}; sign in again`, 'code')
  const login = await deps.store.sso.redeemCode(sha256Hex(input.code), deps.clock.now())
  if (!login?.user_id) throw invalid('This sign-in code is unknown, was used already or has expired')
  if (login.code_challenge) {
    const verifier = input.code_verifier
    if (
      !verifier ||
      !constantTimeEqual(await oidc.calculatePKCECodeChallenge(verifier), login.code_challenge)
    )
      throw invalid('code_verifier does not match the sign-in’s code_challenge')
  } else if (!cookie || !login.browser_hash || !constantTimeEqual(sha256Hex(cookie), login.browser_hash)) {
    throw invalid('This sign-in code belongs to another browser')
  }
  const user = await deps.store.accounts.findUserById(login.user_id)
  if (!user) throw invalid('This account no longer exists')
  return issueSession(deps, user, 'sso', audit)
}

/**
 * docs/api.md §2: with PASSWORD_LOGIN=false the start is refused unless a superadmin can sign in by
 * single sign-on: OIDC_ADMIN_GROUPS makes one at sign-in, or a superadmin is linked already whose
 * provider email OIDC_ALLOWED_DOMAINS admits (one of another domain is refused at every sign-in).
 */
export async function checkSuperadminCanSignIn(deps: Deps) {
  const { PASSWORD_LOGIN, OIDC_ISSUER, OIDC_ADMIN_GROUPS, OIDC_ALLOWED_DOMAINS } = deps.config
  if (PASSWORD_LOGIN || !OIDC_ISSUER || listSetting(OIDC_ADMIN_GROUPS).length > 0) return
  const allowed = listSetting(OIDC_ALLOWED_DOMAINS).map((d) => d.toLowerCase())
  const linked = await deps.store.sso.linkedSuperadmins(OIDC_ISSUER)
  if (linked.some((s) => domainAllowed(s.email, allowed))) return
  throw new ConfigError(
    linked.length === 0
      ? 'invalid configuration: PASSWORD_LOGIN: false, but no superadmin could sign in: none is linked to OIDC_ISSUER and OIDC_ADMIN_GROUPS is unset (set OIDC_ADMIN_GROUPS, or have a superadmin sign in once by SSO first)'
      : `invalid configuration: PASSWORD_LOGIN: false, but no superadmin could sign in: the ${linked.length} linked to OIDC_ISSUER have no email at a domain of OIDC_ALLOWED_DOMAINS, and OIDC_ADMIN_GROUPS is unset (set OIDC_ADMIN_GROUPS, or allow the superadmins' domain)`,
  )
}
