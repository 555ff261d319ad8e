import {
  bigint,
  bigserial,
  boolean,
  doublePrecision,
  index,
  integer,
  pgTable,
  text,
  unique,
} from 'drizzle-orm/pg-core'
import { jsonb } from '../jsonb'

// The model catalogue (docs/api.md §4 "Catalogue entry", docs/api.md §4). Curated from a manifest; worker
// reports feed availability only, never identity (docs/api.md §4 catalogue rule 6). Child rows follow a one-shot
// rename through ON UPDATE CASCADE (docs/api.md §4 catalogue rule 5: the row and its child rows are updated in place).

export const catalogEntries = pgTable(
  'catalog_entries',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    display_name: text().notNull(),
    runtime: text(), // deprecated in favour of serving profiles; still written
    runtime_model_id: text(), // deprecated in favour of serving profiles; still written
    digest: text(), // 64 lowercase hex, or null (then matched by name)
    quantization: text(),
    parameter_size: text(),
    context_length: integer(),
    vram_gb: doublePrecision(), // null disables the VRAM filter
    size_gb: doublePrecision(),
    // null only for staged discovery stubs (enabled = false) awaiting review (docs/api.md §4 catalogue rule 8).
    task_type: text({ enum: ['chat', 'text-generation', 'embedding', 'vision'] }),
    capabilities: jsonb().$type<Record<string, boolean>>().notNull().default({}),
    lineage: text(),
    source_type: text(),
    source_ref: text(),
    source_revision: text(),
    homepage_url: text(),
    org_id: text(), // null = public; set = private to that org (reserved, docs/api.md §4 catalogue rule 10)
    status: text({ enum: ['active', 'requested', 'deprecated', 'unverified'] })
      .notNull()
      .default('active'),
    enabled: boolean().notNull().default(true),
    renamed_from: text(),
    created_at: bigint({ mode: 'number' }).notNull(),
    updated_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [index('catalog_entries_renamed_from').on(t.renamed_from)],
)

export const servingProfiles = pgTable(
  'serving_profiles',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    catalog_id: text()
      .notNull()
      .references(() => catalogEntries.id, { onDelete: 'cascade', onUpdate: 'cascade' }),
    runtime: text().notNull(),
    runtime_model_id: text().notNull(),
    // Platform-owned server-launch settings; per-request sampling stays in each line's body.
    params: jsonb().$type<Record<string, unknown>>().notNull().default({}),
    // true when derived from the entry's runtime/runtime_model_id (no explicit profiles given).
    derived: boolean().notNull().default(false),
  },
  (t) => [unique('serving_profiles_entry_runtime').on(t.catalog_id, t.runtime)],
)

export const artifactFiles = pgTable(
  'artifact_files',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    catalog_id: text()
      .notNull()
      .references(() => catalogEntries.id, { onDelete: 'cascade', onUpdate: 'cascade' }),
    path: text().notNull(),
    sha256: text().notNull(),
    size_bytes: bigint({ mode: 'number' }),
  },
  (t) => [unique('artifact_files_entry_path').on(t.catalog_id, t.path)],
)
