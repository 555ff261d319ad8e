import { bigint, bigserial, index, pgTable, primaryKey, text, uniqueIndex } from 'drizzle-orm/pg-core'
import { users } from './accounts'

// Single sign-on (docs/api.md §2 "Single sign-on"): the provider identities linked to accounts, and
// the sign-ins under way. The twin of src/db/schema/sso.ts.

export const userIdentities = pgTable(
  'user_identities',
  {
    issuer: text().notNull(),
    subject: text().notNull(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    email: text(),
    created_at: bigint({ mode: 'number' }).notNull(),
    last_sign_in_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.issuer, t.subject] }),
    uniqueIndex('user_identities_user_issuer').on(t.user_id, t.issuer),
  ],
)

export const ssoLogins = pgTable(
  'sso_logins',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    state_hash: text().notNull().unique(),
    nonce: text().notNull(),
    code_verifier: text().notNull(),
    return_to: text(),
    redirect_uri: text(),
    client_state: text(),
    code_challenge: text(),
    browser_hash: text().unique(),
    created_at: bigint({ mode: 'number' }).notNull(),
    expires_at: bigint({ mode: 'number' }).notNull(),
    state_used_at: bigint({ mode: 'number' }),
    user_id: text().references(() => users.id, { onDelete: 'cascade' }),
    code_hash: text().unique(),
    code_expires_at: bigint({ mode: 'number' }),
    code_used_at: bigint({ mode: 'number' }),
  },
  (t) => [index('sso_logins_expires').on(t.expires_at)],
)
