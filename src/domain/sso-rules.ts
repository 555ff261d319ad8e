import type { UserRow } from '../db/schema'
import { badRequest, forbidden } from '../lib/errors'

// docs/api.md §2 "Single sign-on": which account a sign-in through the identity provider reaches,
// and with which role, decided once from the provider's claims and what the store holds; and which
// places a sign-in may return to. Pure: the module gathers the facts, an engine applies the plan.

/** What the provider vouched for (the ID token's claims, completed by its userinfo). */
export interface SsoClaims {
  subject: string
  email?: string
  email_verified?: boolean
  name?: string
  preferred_username?: string
  given_name?: string
  family_name?: string
  groups?: string[]
}

/** The settings the rules read: OIDC_ALLOWED_DOMAINS and OIDC_ADMIN_GROUPS, as lists. */
export interface SsoPolicy {
  allowedDomains: string[]
  adminGroups: string[]
}

type Role = UserRow['platform_role']

export type SsoPlan =
  /** The identity is linked: sign that account in (and set its role, when the groups decide it). */
  | { kind: 'sign_in'; user: UserRow; role?: Role }
  /** An account has the provider's verified email: link the identity to it, then sign in. */
  | { kind: 'link'; user: UserRow; email: string; role?: Role }
  /** No account yet: create one (with its Personal Org) linked to the identity. */
  | { kind: 'create'; email: string; full_name: string; role: Role }

/**
 * OIDC_ADMIN_GROUPS set: the groups claim decides the role at every sign-in, both ways (removed from
 * the group, the next sign-in removes the role). Unset: single sign-on never changes a role. A
 * sign-in without a groups claim leaves the role alone: a provider that sends none (the scope or
 * mapper is missing) says nothing about anyone's groups, and must not demote every admin.
 */
export function roleFromGroups(groups: string[] | undefined, adminGroups: string[]): Role | undefined {
  if (adminGroups.length === 0 || groups === undefined) return undefined
  return groups.some((g) => adminGroups.includes(g)) ? 'superadmin' : 'user'
}

const domainOf = (email: string) => email.slice(email.lastIndexOf('@') + 1)

/**
 * Could the provider's `email` pass OIDC_ALLOWED_DOMAINS (the check of planSsoSignIn)? Every email
 * does when the list is empty; none without an email when it is not.
 */
export const domainAllowed = (email: string | null, allowedDomains: string[]) =>
  allowedDomains.length === 0 ||
  (email !== null && allowedDomains.includes(domainOf(email.trim().toLowerCase())))

/**
 * The plan for one sign-in. `linked`: the account the identity is linked to; `byEmail`: the
 * account holding the provider's email (looked up only when nothing is linked). Throws the 4xx
 * of docs/api.md §2 when the sign-in is refused; a refused sign-in creates and links nothing.
 * An email the provider has not verified is no email: it admits no domain, joins no account and
 * makes none (anyone may type any address at many providers).
 */
export function planSsoSignIn(
  claims: SsoClaims,
  policy: SsoPolicy,
  linked: UserRow | undefined,
  byEmail: UserRow | undefined,
): SsoPlan {
  const email = claims.email?.trim().toLowerCase() || undefined
  const verified = email !== undefined && claims.email_verified === true
  if (policy.allowedDomains.length > 0) {
    if (!email)
      throw forbidden(
        'email_required',
        'The identity provider sent no email address, and this server admits only some email domains',
      )
    if (!verified)
      throw forbidden(
        'email_not_verified',
        `The identity provider has not verified ${email}, and this server admits only verified email addresses of some domains; ask the provider's administrator to verify it`,
      )
    if (!policy.allowedDomains.includes(domainOf(email)))
      throw forbidden(
        'email_domain_not_allowed',
        `Accounts with an email at ${domainOf(email)} may not sign in to this server`,
      )
  }
  const role = roleFromGroups(claims.groups, policy.adminGroups)
  const active = (user: UserRow) => {
    if (!user.is_active) throw forbidden('account_disabled', 'This account has been deactivated')
    return user
  }
  if (linked) return { kind: 'sign_in', user: active(linked), role }
  if (!email)
    throw forbidden('email_required', 'The identity provider sent no email address for this account')
  if (!verified)
    throw forbidden(
      'email_not_verified',
      byEmail
        ? // An account is only ever joined to the identity that proves its email (docs/api.md §2).
          `An account with ${email} exists, and the identity provider has not verified that this email is yours`
        : `The identity provider has not verified ${email}; an account is made only for a verified email address. Ask the provider's administrator to verify it, then sign in again`,
    )
  if (byEmail) return { kind: 'link', user: active(byEmail), email, role }
  return { kind: 'create', email, full_name: fullNameOf(claims, email), role: role ?? 'user' }
}

/** The account's name: the provider's `name`, else given and family names, else the username or email. */
export function fullNameOf(claims: SsoClaims, email: string): string {
  const joined = [claims.given_name, claims.family_name].filter(Boolean).join(' ')
  const name = claims.name?.trim() || joined.trim() || claims.preferred_username?.trim() || email
  return name.slice(0, 200)
}

/** Where the dashboard may return after a sign-in: a path of this server, nothing else. */
export function checkReturnTo(value: string | undefined): string {
  if (value === undefined || value === '') return '/app/batches'
  // `//host` and `/\host` are other hosts to a browser; only one leading slash is a local path.
  if (!value.startsWith('/') || value.startsWith('//') || value.startsWith('/\\') || /[\s\\]/.test(value))
    throw badRequest(
      'invalid_return_to',
      'return_to must be a path on this server, such as /app/keys',
      'return_to',
    )
  return value
}

/**
 * RFC 8252 §7.3: a terminal's redirect is an http address on a loopback IP literal with its port,
 * nothing else (never a host name, which another machine could answer).
 */
export function checkLoopbackRedirect(value: string): string {
  const url = URL.canParse(value) ? new URL(value) : null
  if (
    url?.protocol !== 'http:' ||
    !(url.hostname === '127.0.0.1' || url.hostname === '[::1]') ||
    url.port === '' ||
    url.username ||
    url.password ||
    url.hash ||
    url.search
  )
    throw badRequest(
      'invalid_redirect_uri',
      'redirect_uri must be a loopback address with a port, such as http://127.0.0.1:53121/callback',
      'redirect_uri',
    )
  return url.href
}

/** RFC 7636 §4.2: an S256 challenge is 43 base64url characters. */
export function checkCodeChallenge(challenge: string | undefined, method: string | undefined): string {
  if (method !== 'S256')
    throw badRequest('invalid_code_challenge', 'code_challenge_method must be S256', 'code_challenge_method')
  if (!challenge || !/^[A-Za-z0-9_-]{43}$/.test(challenge))
    throw badRequest(
      'invalid_code_challenge',
      'code_challenge must be the base64url SHA-256 of the code verifier (43 characters)',
      'code_challenge',
    )
  return challenge
}

/** The parameters of the provider's redirect to the callback (RFC 6749 §4.1.2, RFC 9207) and their longest. */
const CALLBACK_PARAMS = { code: 4096, state: 512, iss: 2000, error: 200, error_description: 2000 } as const

/**
 * docs/api.md §2 callback: the shape of the provider's answer, before anything of it is believed —
 * each parameter at most once and not too long; a `state`; then either a `code` or an `error`,
 * never both, never neither. Anything else is a 400 `invalid_callback`. `state` alone is asked for
 * first (`stateOnly`): without it, no sign-in can be found to tell.
 */
export function checkCallback(query: URLSearchParams, stateOnly = false): string {
  const invalid = (why: string, param: string) =>
    badRequest(
      'invalid_callback',
      `The identity provider's answer is malformed: ${why}; start the sign-in again`,
      param,
    )
  for (const [param, longest] of Object.entries(CALLBACK_PARAMS)) {
    const values = query.getAll(param)
    if (values.length > 1) throw invalid(`${param} is given more than once`, param)
    if ((values[0]?.length ?? 0) > longest)
      throw invalid(`${param} is longer than ${longest} characters`, param)
  }
  const state = query.get('state')
  if (!state) throw invalid('it carries no state', 'state')
  if (stateOnly) return state
  const code = query.get('code')
  const error = query.get('error')
  if (code && error) throw invalid('it carries both a code and an error', 'code')
  if (!code && !error) throw invalid('it carries neither a code nor an error', 'code')
  return state
}
