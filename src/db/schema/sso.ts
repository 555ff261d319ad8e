import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core'
import { users } from './accounts'

// Single sign-on (docs/api.md §2 "Single sign-on"): the provider identities linked to accounts, and
// the sign-ins under way.

/**
 * An account's identity at an OpenID provider: the issuer and the provider's subject, which stays
 * when the person's email changes there. One identity per account and issuer.
 */
export const userIdentities = sqliteTable(
  'user_identities',
  {
    issuer: text().notNull(),
    subject: text().notNull(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    // The provider's email when the link was made (for an admin reading the table; never matched).
    email: text(),
    created_at: integer().notNull(),
    last_sign_in_at: integer().notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.issuer, t.subject] }),
    uniqueIndex('user_identities_user_issuer').on(t.user_id, t.issuer),
  ],
)

/**
 * A sign-in under way, from /v1/auth/oidc/start to the one-time code's exchange. The `state` and
 * the one-time code are kept only as SHA-256; each is claimed once by a guarded UPDATE, so a
 * replay finds nothing, on any instance.
 */
export const ssoLogins = sqliteTable(
  'sso_logins',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    state_hash: text().notNull().unique(),
    // Sent to the provider and checked against its answer: the ID token's nonce, PKCE's verifier.
    nonce: text().notNull(),
    code_verifier: text().notNull(),
    // The dashboard's page to return to, or a terminal's loopback address (RFC 8252) with the
    // terminal's own state and PKCE challenge.
    return_to: text(),
    redirect_uri: text(),
    client_state: text(),
    code_challenge: text(),
    // The SHA-256 of the random value in the browser's gk_sso cookie, which ties the sign-in to the
    // browser that started it; the value itself never goes into a URL (the state does).
    browser_hash: text().unique(),
    created_at: integer().notNull(),
    expires_at: integer().notNull(),
    state_used_at: integer(),
    // Set once the provider vouched for the person: the one-time code the browser or the terminal
    // exchanges for a session.
    user_id: text().references(() => users.id, { onDelete: 'cascade' }),
    code_hash: text().unique(),
    code_expires_at: integer(),
    code_used_at: integer(),
  },
  (t) => [index('sso_logins_expires').on(t.expires_at)],
)

export type UserIdentityRow = typeof userIdentities.$inferSelect
export type SsoLoginRow = typeof ssoLogins.$inferSelect
