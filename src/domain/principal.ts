import type { UserRow } from '../db/schema'

// Who is calling (docs/api.md §1): what src/http/credentials.ts resolves a credential to and every
// service takes. Which callers a route accepts is decided by src/http/auth.ts.

export type UserPrincipal = {
  kind: 'user'
  via: 'jwt' | 'personal_key'
  user: UserRow
  keyId: string | null
  /** A JWT of a session begun by single sign-on (docs/api.md §1: must_change_password holds it not back). */
  sso?: boolean
}
export type WorkerPrincipal = { kind: 'worker'; orgId: string; keyId: string }
export type AnonymousPrincipal = { kind: 'anonymous' }
export type Principal = UserPrincipal | WorkerPrincipal | AnonymousPrincipal

/** Anyone without a credential (one object: principals are never changed). */
export const ANONYMOUS: AnonymousPrincipal = Object.freeze({ kind: 'anonymous' })
