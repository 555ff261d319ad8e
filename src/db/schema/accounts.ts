import { index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core'

// Accounts: users, organizations, memberships, API keys and reset tokens (docs/api.md §3, docs/api.md §1–3).
// Every table carries an integer `seq` (rowid alias) beside its public random `id`: lists are
// newest-first by `seq`, a stable order that random ids cannot give and VACUUM does not renumber.

export const users = sqliteTable('users', {
  seq: integer().primaryKey({ autoIncrement: true }),
  id: text().notNull().unique(),
  email: text().notNull().unique(),
  password_hash: text().notNull(),
  full_name: text().notNull(),
  platform_role: text({ enum: ['user', 'superadmin'] })
    .notNull()
    .default('user'),
  is_active: integer({ mode: 'boolean' }).notNull().default(true),
  must_change_password: integer({ mode: 'boolean' }).notNull().default(false),
  // Bumped by a password change or reset: JWTs carrying an older `tv` stop working.
  token_version: integer().notNull().default(0),
  created_at: integer().notNull(),
  updated_at: integer().notNull(),
})

export const organizations = sqliteTable('organizations', {
  seq: integer().primaryKey({ autoIncrement: true }),
  id: text().notNull().unique(),
  name: text().notNull(),
  personal: integer({ mode: 'boolean' }).notNull().default(false),
  created_at: integer().notNull(),
})

export const memberships = sqliteTable(
  'memberships',
  {
    org_id: text()
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    role: text({ enum: ['owner', 'admin', 'viewer'] }).notNull(),
    created_at: integer().notNull(),
  },
  (t) => [primaryKey({ columns: [t.org_id, t.user_id] }), index('memberships_user').on(t.user_id)],
)

export const apiKeys = sqliteTable(
  'api_keys',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
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
    created_at: integer().notNull(),
    expires_at: integer(),
    last_used_at: integer(),
    revoked_at: integer(),
  },
  (t) => [index('api_keys_user').on(t.user_id), index('api_keys_org').on(t.org_id)],
)

export const passwordResetTokens = sqliteTable(
  'password_reset_tokens',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    // SHA-256 of the mailed token; the raw token exists only in the mail.
    token_hash: text().notNull().unique(),
    created_at: integer().notNull(),
    expires_at: integer().notNull(),
    used_at: integer(),
  },
  (t) => [index('password_reset_tokens_user').on(t.user_id)],
)

export type UserRow = typeof users.$inferSelect
export type OrgRow = typeof organizations.$inferSelect
export type ApiKeyRow = typeof apiKeys.$inferSelect
export type OrgRole = (typeof memberships.$inferSelect)['role']
