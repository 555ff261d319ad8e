import type { SsoLoginRow, UserRow } from '../db/schema'
import type { AuditContext } from '../domain/audit'

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
  /** The SHA-256 of the browser's gk_sso cookie value. */
  browser_hash: string
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
  /**
   * The callback: claims the sign-in by its state, once, while unexpired, in the browser that
   * started it (`browserHash`, its cookie's); undefined otherwise, and nothing claimed.
   */
  takeLogin(stateHash: string, browserHash: string, now: number): Promise<SsoLoginRow | undefined>
  /**
   * The callback's end, on the sign-in claimed: the account the provider vouched for, with the
   * one-time code (its hash) — or, for a terminal's sign-in, without one: the code waits for the
   * person's confirmation (confirmLogin).
   */
  grantCode(
    stateHash: string,
    userId: string,
    code: { hash: string; expires_at: number } | null,
  ): Promise<void>
  /**
   * A terminal's sign-in confirmed in its browser: the one-time code set on the sign-in of that
   * browser that waits for it (claimed, vouched for, no code yet, unexpired), once; undefined
   * when none waits.
   */
  confirmLogin(
    browserHash: string,
    code: { hash: string; expires_at: number },
    now: number,
  ): Promise<SsoLoginRow | undefined>
  /** A terminal's sign-in cancelled in its browser: the waiting sign-in deleted, once (as confirmLogin). */
  cancelLogin(browserHash: string, now: number): Promise<SsoLoginRow | undefined>
  /** The exchange: claims the one-time code, once, while unexpired; undefined otherwise. */
  redeemCode(codeHash: string, now: number): Promise<SsoLoginRow | undefined>
  /** The account linked to this identity, if any. */
  findLinkedUser(issuer: string, subject: string): Promise<UserRow | undefined>
  /**
   * A sign-in of a linked identity: its time recorded and, when given, the account's role set
   * (docs/api.md §2 OIDC_ADMIN_GROUPS) — a new role bumps the token version (docs/api.md §1) — with
   * its `user.role_changed` entry when the role changes
   * (docs/api.md §17; the actors of src/domain/audit.ts ssoActors), in one transaction — except
   * that the last active superadmin keeps the role, with a `user.role_change_refused` entry.
   * Returns the account.
   */
  recordSignIn(
    issuer: string,
    subject: string,
    now: number,
    role: UserRow['platform_role'] | undefined,
    audit: AuditContext,
  ): Promise<UserRow | undefined>
  /**
   * Links an identity to an existing account, with its `user.identity_linked` entry, recording the
   * sign-in as recordSignIn does, in one transaction. 409 `identity_conflict` when the identity is
   * linked already or the account has another identity at this issuer.
   */
  link(
    userId: string,
    identity: Identity,
    now: number,
    role: UserRow['platform_role'] | undefined,
    audit: AuditContext,
  ): Promise<UserRow>
  /**
   * docs/api.md §2 PASSWORD_LOGIN=false: the active superadmins linked at this issuer, each with the
   * email the provider gave for it (null when it gave none), whose domain OIDC_ALLOWED_DOMAINS judges.
   */
  linkedSuperadmins(issuer: string): Promise<{ user_id: string; email: string | null }[]>
}
