import { asc, eq, inArray, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { ArtifactFileRow, CatalogEntryRow, ServingProfileRow } from '../../db/schema'
import type { CatalogueEntry as ManifestEntry } from '../../domain/catalogue'
import {
  artifactChanges,
  differs,
  hasChanges,
  managedFields,
  profileChanges,
  renameDecision,
} from '../../domain/catalogue-upsert'
import { CatalogueCache, type CatalogueStore, type UpsertOutcome } from '../catalogue'
import type { PgDb, PgTx } from './db'

// The catalogue on PostgreSQL. Instances starting together seed one after the other: the seed
// transaction takes an advisory lock first, so two seeds never race on the same new id.

const { artifactFiles, catalogEntries, servingProfiles } = schema

// Any constant shared by every instance (pg_advisory_xact_lock keys are 64-bit integers).
const SEED_LOCK = 7_146_251_878

async function upsertEntry(tx: PgTx, entry: ManifestEntry, now: number): Promise<UpsertOutcome> {
  const byId = async (id: string) =>
    ((await tx.select().from(catalogEntries).where(eq(catalogEntries.id, id))) as CatalogEntryRow[])[0]
  let existing = await byId(entry.id)
  const old = entry.renamed_from === null ? undefined : await byId(entry.renamed_from)
  const { rename, note } = renameDecision(entry, existing, old)
  if (rename) {
    // Child FKs are ON UPDATE CASCADE: the child rows follow the row.
    await tx.update(catalogEntries).set({ id: entry.id }).where(eq(catalogEntries.seq, rename.seq))
    existing = { ...rename, id: entry.id }
  }

  const fields = managedFields(entry)
  let result: UpsertOutcome['result']
  if (!existing) {
    await tx.insert(catalogEntries).values({ id: entry.id, ...fields, created_at: now, updated_at: now })
    result = 'inserted'
  } else {
    const rowChanged = differs(existing, fields)
    if (rowChanged)
      await tx
        .update(catalogEntries)
        .set({ ...fields, updated_at: now })
        .where(eq(catalogEntries.id, entry.id))
    result = rowChanged || rename ? 'updated' : 'unchanged'
  }

  const profiles = profileChanges(
    (await tx
      .select()
      .from(servingProfiles)
      .where(eq(servingProfiles.catalog_id, entry.id))
      .orderBy(asc(servingProfiles.seq))) as ServingProfileRow[],
    entry,
  )
  if (profiles.deletes.length)
    await tx.delete(servingProfiles).where(inArray(servingProfiles.seq, profiles.deletes))
  for (const { seq, want } of profiles.updates)
    await tx
      .update(servingProfiles)
      .set({ runtime_model_id: want.runtime_model_id, params: want.params, derived: want.derived })
      .where(eq(servingProfiles.seq, seq))
  for (const p of profiles.inserts) await tx.insert(servingProfiles).values({ catalog_id: entry.id, ...p })

  const files = artifactChanges(
    (await tx
      .select()
      .from(artifactFiles)
      .where(eq(artifactFiles.catalog_id, entry.id))
      .orderBy(asc(artifactFiles.seq))) as ArtifactFileRow[],
    entry,
  )
  if (files.deletes.length) await tx.delete(artifactFiles).where(inArray(artifactFiles.seq, files.deletes))
  for (const { seq, want } of files.updates)
    await tx
      .update(artifactFiles)
      .set({ sha256: want.sha256, size_bytes: want.size_bytes })
      .where(eq(artifactFiles.seq, seq))
  for (const f of files.inserts) await tx.insert(artifactFiles).values({ catalog_id: entry.id, ...f })

  if ((hasChanges(profiles) || hasChanges(files)) && result === 'unchanged') {
    await tx.update(catalogEntries).set({ updated_at: now }).where(eq(catalogEntries.id, entry.id))
    result = 'updated'
  }
  return { result, renamedFrom: rename?.id, note }
}

export function postgresCatalogue(db: PgDb): CatalogueStore {
  const cache = new CatalogueCache(async () => {
    const [entries, profiles, artifacts] = await Promise.all([
      db
        .select({
          id: catalogEntries.id,
          renamed_from: catalogEntries.renamed_from,
          enabled: catalogEntries.enabled,
          org_id: catalogEntries.org_id,
          display_name: catalogEntries.display_name,
          parameter_size: catalogEntries.parameter_size,
          vram_gb: catalogEntries.vram_gb,
          size_gb: catalogEntries.size_gb,
          digest: catalogEntries.digest,
          runtime: catalogEntries.runtime,
          runtime_model_id: catalogEntries.runtime_model_id,
        })
        .from(catalogEntries)
        .orderBy(asc(catalogEntries.seq)),
      db
        .select({
          catalog_id: servingProfiles.catalog_id,
          runtime: servingProfiles.runtime,
          runtime_model_id: servingProfiles.runtime_model_id,
          params: servingProfiles.params,
        })
        .from(servingProfiles)
        .orderBy(asc(servingProfiles.seq)),
      db
        .select({ catalog_id: artifactFiles.catalog_id, sha256: artifactFiles.sha256 })
        .from(artifactFiles)
        .orderBy(asc(artifactFiles.seq)),
    ])
    return { entries, profiles, artifacts }
  })
  return {
    async upsertEntries(entries, now) {
      try {
        return await db.transaction(async (tx) => {
          await tx.execute(sql`SELECT pg_advisory_xact_lock(${SEED_LOCK})`)
          const out: UpsertOutcome[] = []
          for (const e of entries) out.push(await upsertEntry(tx, e, now))
          return out
        })
      } finally {
        // The other instances forget theirs on the models_changed signal (catalogue/view.ts
        // modelsChanged); a lost signal: CATALOGUE_REREAD_MS.
        cache.forget()
      }
    },
    async entry(id) {
      const [row] = await db.select().from(catalogEntries).where(eq(catalogEntries.id, id))
      return row as CatalogEntryRow | undefined
    },
    readCatalogue: () => cache.get(),
    forgetCatalogue: () => cache.forget(),
    async enabledEntries() {
      return (await db
        .select()
        .from(catalogEntries)
        .where(eq(catalogEntries.enabled, true))
        // Byte order, as SQLite sorts: the database's collation may ignore punctuation.
        .orderBy(sql`${catalogEntries.id} COLLATE "C"`)) as CatalogEntryRow[]
    },
  }
}
