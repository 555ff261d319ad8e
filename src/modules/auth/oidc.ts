import * as oidc from 'openid-client'
import type { Config } from '../../config'
import type { SsoClaims } from '../../domain/sso-rules'
import { AppError } from '../../lib/errors'
import { log } from '../../lib/logger'

// The identity provider as gridkeep speaks to it (docs/api.md §2 "Single sign-on"), through
// openid-client (a certified OpenID Connect relying party on oauth4webapi): discovery from
// OIDC_ISSUER's /.well-known/openid-configuration, the authorization code grant with PKCE, state and
// nonce, and the ID token's checks — its signature against the provider's JWKS (refetched when a
// token names a key it has not seen, so the provider may rotate keys), issuer, audience, expiry
// and issue time within CLOCK_TOLERANCE_SECONDS, and nonce. Every request to the provider times out
// after OIDC_TIMEOUT_SECONDS. What goes wrong becomes one AppError: the provider's refusal a 4xx,
// the provider unreachable or confused a 502.

/** The skew tolerated between the provider's clock and ours when checking exp, iat and nbf. */
export const CLOCK_TOLERANCE_SECONDS = 30

export interface AuthorizationRequest {
  redirectUri: string
  state: string
  nonce: string
  codeChallenge: string
}

export interface AuthorizationChecks {
  state: string
  nonce: string
  codeVerifier: string
}

/** The provider of this server: its discovered configuration, kept once found. */
export class IdentityProvider {
  private configuration: Promise<oidc.Configuration> | null = null
  private warnedNoGroups = false

  constructor(private readonly config: Config) {}

  /**
   * docs/deployment.md "Single sign-on": OIDC_ADMIN_GROUPS is set and a sign-in came without a
   * groups claim, so it changed no role. Said once per server: every sign-in would say it again.
   */
  noGroupsClaim() {
    if (this.warnedNoGroups) return
    this.warnedNoGroups = true
    log.warn(
      'the identity provider sent no groups claim: OIDC_ADMIN_GROUPS changes no role until it does (add the scope that carries groups to OIDC_SCOPES, or a groups mapper at the provider)',
      { issuer: this.issuer },
    )
  }

  /** The issuer, as configured (the identities' key, docs/api.md §2). */
  get issuer(): string {
    return this.config.OIDC_ISSUER!
  }

  /** The provider's authorization endpoint with this sign-in's parameters (discovering it first). */
  async authorizationUrl(request: AuthorizationRequest): Promise<string> {
    const configuration = await this.discover()
    return oidc
      .buildAuthorizationUrl(configuration, {
        redirect_uri: request.redirectUri,
        scope: this.config.OIDC_SCOPES,
        state: request.state,
        nonce: request.nonce,
        code_challenge: request.codeChallenge,
        code_challenge_method: 'S256',
      })
      .toString()
  }

  /**
   * The provider's answer at the callback (`callbackUrl`: the redirect URI with its query): the
   * code redeemed, the ID token checked, the userinfo added; the claims the rules read.
   */
  async redeem(callbackUrl: URL, checks: AuthorizationChecks): Promise<SsoClaims> {
    const configuration = await this.discover()
    let asking: 'token' | 'userinfo' = 'token'
    try {
      checkIssuerParameter(callbackUrl.searchParams, configuration.serverMetadata())
      const tokens = await oidc.authorizationCodeGrant(configuration, callbackUrl, {
        expectedState: checks.state,
        expectedNonce: checks.nonce,
        pkceCodeVerifier: checks.codeVerifier,
        idTokenExpected: true,
      })
      const idToken = tokens.claims()!
      asking = 'userinfo'
      // GitLab and others put groups and email only in the userinfo answer; its subject must be
      // the ID token's (openid-client checks it).
      const userinfo = configuration.serverMetadata().userinfo_endpoint
        ? await oidc.fetchUserInfo(configuration, tokens.access_token, idToken.sub)
        : {}
      return claimsOf({ ...idToken, ...userinfo, sub: idToken.sub })
    } catch (error) {
      throw this.failure(error, asking)
    }
  }

  private discover(): Promise<oidc.Configuration> {
    this.configuration ??= this.load().catch((error) => {
      // Not kept: the next sign-in tries again (the provider may be back).
      this.configuration = null
      throw this.failure(error)
    })
    return this.configuration
  }

  private load(): Promise<oidc.Configuration> {
    const { OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_TIMEOUT_SECONDS } = this.config
    const issuer = new URL(OIDC_ISSUER!)
    const execute = [oidc.enableNonRepudiationChecks]
    // An http:// issuer is the operator's explicit choice (a LAN, a test provider).
    if (issuer.protocol === 'http:') execute.push(oidc.allowInsecureRequests)
    return oidc.discovery(
      issuer,
      OIDC_CLIENT_ID!,
      { client_secret: OIDC_CLIENT_SECRET, [oidc.clockTolerance]: CLOCK_TOLERANCE_SECONDS },
      // RFC 6749 §2.3.1: every provider takes HTTP Basic; without a secret, a public client (PKCE).
      OIDC_CLIENT_SECRET === undefined ? oidc.None() : oidc.ClientSecretBasic(OIDC_CLIENT_SECRET),
      { execute, timeout: OIDC_TIMEOUT_SECONDS },
    )
  }

  /** docs/api.md §2 "Single sign-on", errors: what a failure of the provider exchange answers. */
  private failure(error: unknown, asking: 'token' | 'userinfo' = 'token'): AppError {
    if (error instanceof AppError) return error
    const timeout = this.config.OIDC_TIMEOUT_SECONDS
    const unavailable = (why: string) => {
      log.warn('identity provider unavailable', { issuer: this.issuer, why })
      return new AppError(502, 'sso_provider_unavailable', `The identity provider ${why}. Try again later.`)
    }
    if (error instanceof oidc.AuthorizationResponseError) {
      const more = error.error_description ? `: ${error.error_description}` : ''
      return new AppError(
        400,
        'sso_refused',
        `The identity provider refused the sign-in (${error.error}${more})`,
      )
    }
    if (error instanceof oidc.ResponseBodyError) {
      if (error.error === 'invalid_grant')
        return new AppError(
          400,
          'invalid_code',
          'The identity provider refused the authorization code: it was used already or has expired. Sign in again.',
        )
      return unavailable(
        `refused gridkeep's request (${error.error}); check OIDC_CLIENT_ID and OIDC_CLIENT_SECRET`,
      )
    }
    // A 401 with WWW-Authenticate: at the token endpoint, the client's credentials (invalid_client).
    if (error instanceof oidc.WWWAuthenticateChallengeError)
      return asking === 'userinfo'
        ? unavailable('refused the userinfo request')
        : unavailable(
            `refused gridkeep's request (${error.cause[0]?.parameters.error ?? error.status}); check OIDC_CLIENT_ID and OIDC_CLIENT_SECRET`,
          )
    const code = (error as { code?: unknown }).code
    // A fetch that never got an answer (refused, reset, unresolvable); openid-client's own argument
    // errors are TypeErrors too, with ERR_INVALID_ARG_* codes, and are bugs.
    if (error instanceof TypeError && !String(code).startsWith('ERR_INVALID_ARG'))
      return unavailable(`cannot be reached (${error.message})`)
    if (error instanceof oidc.ClientError) {
      switch (code) {
        case 'OAUTH_TIMEOUT':
        case 'OAUTH_ABORT':
          return unavailable(`did not answer within ${timeout} s`)
        case 'OAUTH_RESPONSE_IS_NOT_CONFORM':
        case 'OAUTH_RESPONSE_IS_NOT_JSON':
        case 'OAUTH_INVALID_SERVER_METADATA':
        case 'OAUTH_MISSING_SERVER_METADATA':
        case 'OAUTH_HTTP_REQUEST_FORBIDDEN':
          return unavailable(`answered what is not OpenID Connect (${detail(error)})`)
        default:
          return new AppError(
            401,
            'invalid_id_token',
            `The identity provider's answer was refused: ${detail(error)}`,
          )
      }
    }
    if (error instanceof Error && error.name === 'TimeoutError')
      return unavailable(`did not answer within ${timeout} s`)
    return error instanceof Error
      ? (error as AppError)
      : new AppError(500, 'internal_error', 'Internal server error')
  }
}

/**
 * RFC 9207: a provider that says it names itself in its answers (Keycloak, oidc-provider …) must, and
 * with its own issuer; an answer that does not is malformed (docs/api.md §2: 400 `invalid_callback`),
 * whether it carries a code or an error — no ID token was looked at.
 */
function checkIssuerParameter(query: URLSearchParams, metadata: oidc.ServerMetadata) {
  const iss = query.get('iss')
  const wrong =
    iss === null
      ? metadata.authorization_response_iss_parameter_supported === true
        ? 'it does not name its issuer (iss)'
        : null
      : iss !== metadata.issuer
        ? `it names another issuer (iss) than ${metadata.issuer}`
        : null
  if (wrong)
    throw new AppError(
      400,
      'invalid_callback',
      `The identity provider's answer is malformed: ${wrong}; start the sign-in again`,
      'iss',
    )
}

/** The library's words and those of its cause: `unexpected JWT "aud" (audience) claim value`. */
function detail(error: Error): string {
  const cause = error.cause instanceof Error ? error.cause.message : null
  return cause && cause !== error.message ? cause : error.message
}

/** The claims the rules read, typed; a provider's stringly `"true"` and single group accepted. */
function claimsOf(raw: Record<string, unknown>): SsoClaims {
  const text = (v: unknown) => (typeof v === 'string' && v.trim() ? v.trim() : undefined)
  const groups = raw.groups
  return {
    subject: String(raw.sub),
    email: text(raw.email),
    email_verified: raw.email_verified === true || raw.email_verified === 'true',
    name: text(raw.name),
    preferred_username: text(raw.preferred_username),
    given_name: text(raw.given_name),
    family_name: text(raw.family_name),
    groups: Array.isArray(groups)
      ? groups.filter((g): g is string => typeof g === 'string')
      : typeof groups === 'string'
        ? [groups]
        : undefined,
  }
}

/** The per-server identity provider (src/compose.ts): null without OIDC_ISSUER. */
export interface OidcState {
  identityProvider: IdentityProvider | null
}
