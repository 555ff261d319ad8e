import type { SsoLoginRow, UserRow } from '../db/schema'

// Single sign-on (docs/api.md §2 "Single sign-on"): sign-ins under way, claimed once by their state
// and once by their one-time code, and the provider identities linked to accounts. Which account a
// sign-in reaches, and with which role, is decided above the seam (src/domain/sso-rules.ts); an
// engine applies it atomically.

export interface NewSsoLogin {
  state_hash: string
  nonce: string
  code_verifier: string
  return_to: string | null
  redirect_uri: string | null
  client_state: string | null
  code_challenge: string | null
  created_at: number
  expires_at: number
}

/** An identity at a provider: the issuer and its subject (and the provider's email, for the record). */
export interface Identity {
  issuer: string
  subject: string
  email: string | null
}

/** Rows of finished or abandoned sign-ins are kept this long past their expiry, then deleted. */
export const SSO_LOGIN_KEPT_SECONDS = 3600

export interface SsoStore {
  /** /start: stores a sign-in; deletes those expired more than SSO_LOGIN_KEPT_SECONDS ago. */
  startLogin(login: NewSsoLogin): Promise<void>
  /** The callback: claims the sign-in by its state, once, while unexpired; undefined otherwise. */
  takeLogin(stateHash: string, now: number): Promise<SsoLoginRow | undefined>
  /** The callback's end: the one-time code (its hash) for `userId`, on the sign-in claimed. */
  grantCode(stateHash: string, codeHash: string, userId: string, expiresAt: number): Promise<void>
  /** The exchange: claims the one-time code, once, while unexpired; undefined otherwise. */
  redeemCode(codeHash: string, now: number): Promise<SsoLoginRow | undefined>
  /** The account linked to this identity, if any. */
  findLinkedUser(issuer: string, subject: string): Promise<UserRow | undefined>
  /**
   * A sign-in of a linked identity: its time recorded and, when given, the account's role set
   * (docs/api.md §2 OIDC_ADMIN_GROUPS). Returns the account.
   */
  recordSignIn(
    issuer: string,
    subject: string,
    now: number,
    role?: UserRow['platform_role'],
  ): Promise<UserRow | undefined>
  /**
   * Links an identity to an existing account, recording the sign-in as recordSignIn does. 409
   * `identity_conflict` when the identity is linked already or the account has another identity
   * at this issuer.
   */
  link(userId: string, identity: Identity, now: number, role?: UserRow['platform_role']): Promise<UserRow>
  /** docs/api.md §2 PASSWORD_LOGIN=false: is there an active superadmin linked at this issuer? */
  hasLinkedSuperadmin(issuer: string): Promise<boolean>
}
