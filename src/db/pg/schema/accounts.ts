import { bigint, bigserial, boolean, index, integer, pgTable, primaryKey, text } from 'drizzle-orm/pg-core'

// Accounts: users, organizations, memberships, API keys and reset tokens (docs/api.md §3, docs/api.md §1–3).
// Every table carries an integer `seq` (rowid alias) beside its public random `id`: lists are
// newest-first by `seq`, a stable order that random ids cannot give and VACUUM does not renumber.

export const users = pgTable('users', {
  seq: bigserial({ mode: 'number' }).primaryKey(),
  id: text().notNull().unique(),
  email: text().notNull().unique(),
  password_hash: text().notNull(),
  full_name: text().notNull(),
  platform_role: text({ enum: ['user', 'superadmin'] })
    .notNull()
    .default('user'),
  is_active: boolean().notNull().default(true),
  must_change_password: boolean().notNull().default(false),
  // Bumped by a password change or reset: JWTs carrying an older `tv` stop working.
  token_version: integer().notNull().default(0),
  created_at: bigint({ mode: 'number' }).notNull(),
  updated_at: bigint({ mode: 'number' }).notNull(),
})

export const organizations = pgTable('organizations', {
  seq: bigserial({ mode: 'number' }).primaryKey(),
  id: text().notNull().unique(),
  name: text().notNull(),
  personal: boolean().notNull().default(false),
  created_at: bigint({ mode: 'number' }).notNull(),
})

export const memberships = pgTable(
  'memberships',
  {
    org_id: text()
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    role: text({ enum: ['owner', 'admin', 'viewer'] }).notNull(),
    created_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.org_id, t.user_id] }), index('memberships_user').on(t.user_id)],
)

export const apiKeys = pgTable(
  'api_keys',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    key_type: text({ enum: ['personal', 'worker'] }).notNull(),
    name: text().notNull(),
    // First 12 characters of the raw key: all a listing ever shows.
    prefix: text().notNull(),
    // SHA-256 of the raw key, hex. The raw key is never stored.
    key_hash: text().notNull().unique(),
    org_id: text().references(() => organizations.id, { onDelete: 'cascade' }),
    user_id: text().references(() => users.id, { onDelete: 'cascade' }),
    created_by: text(),
    created_at: bigint({ mode: 'number' }).notNull(),
    expires_at: bigint({ mode: 'number' }),
    last_used_at: bigint({ mode: 'number' }),
    revoked_at: bigint({ mode: 'number' }),
  },
  (t) => [index('api_keys_user').on(t.user_id), index('api_keys_org').on(t.org_id)],
)

export const passwordResetTokens = pgTable(
  'password_reset_tokens',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    // SHA-256 of the mailed token; the raw token exists only in the mail.
    token_hash: text().notNull().unique(),
    created_at: bigint({ mode: 'number' }).notNull(),
    expires_at: bigint({ mode: 'number' }).notNull(),
    used_at: bigint({ mode: 'number' }),
  },
  (t) => [index('password_reset_tokens_user').on(t.user_id)],
)
