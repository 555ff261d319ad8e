import { asc, eq, inArray, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { ArtifactFileRow, CatalogEntryRow, ServingProfileRow } from '../../db/schema'
import { catalogueSeeded } from '../../domain/audit'
import type { CatalogueEntry as ManifestEntry } from '../../domain/catalogue'
import { childrenPlan, entryRowPlan } from '../../domain/catalogue-upsert'
import { CatalogueCache, type CatalogueStore, type UpsertOutcome } from '../catalogue'
import { catalogueColumns } from '../statements'
import { appendAudit } from './audit'
import type { PgDb, PgTx } from './db'

// The catalogue on PostgreSQL. Instances starting together seed one after the other: the seed
// transaction takes an advisory lock first, so two seeds never race on the same new id.

const { artifactFiles, catalogEntries, servingProfiles } = schema
const read = catalogueColumns({
  entries: catalogEntries,
  profiles: servingProfiles,
  artifacts: artifactFiles,
})

// Any constant shared by every instance (pg_advisory_xact_lock keys are 64-bit integers).
const SEED_LOCK = 7_146_251_878

async function upsertEntry(tx: PgTx, entry: ManifestEntry, now: number): Promise<UpsertOutcome> {
  const byId = async (id: string) =>
    ((await tx.select().from(catalogEntries).where(eq(catalogEntries.id, id))) as CatalogEntryRow[])[0]
  const existing = await byId(entry.id)
  const old = entry.renamed_from === null ? undefined : await byId(entry.renamed_from)
  const row = entryRowPlan(entry, existing, old, now)
  // Child FKs are ON UPDATE CASCADE: the child rows follow the row.
  if (row.rename)
    await tx.update(catalogEntries).set({ id: entry.id }).where(eq(catalogEntries.seq, row.rename.seq))
  if (row.write?.kind === 'insert') await tx.insert(catalogEntries).values(row.write.values)
  else if (row.write)
    await tx.update(catalogEntries).set(row.write.set).where(eq(catalogEntries.id, entry.id))

  const { profiles, files, touch, result } = childrenPlan(
    entry,
    (await tx
      .select()
      .from(servingProfiles)
      .where(eq(servingProfiles.catalog_id, entry.id))
      .orderBy(asc(servingProfiles.seq))) as ServingProfileRow[],
    (await tx
      .select()
      .from(artifactFiles)
      .where(eq(artifactFiles.catalog_id, entry.id))
      .orderBy(asc(artifactFiles.seq))) as ArtifactFileRow[],
    row.result,
  )
  if (profiles.deletes.length)
    await tx.delete(servingProfiles).where(inArray(servingProfiles.seq, profiles.deletes))
  for (const { seq, set } of profiles.updates)
    await tx.update(servingProfiles).set(set).where(eq(servingProfiles.seq, seq))
  for (const values of profiles.inserts) await tx.insert(servingProfiles).values(values)
  if (files.deletes.length) await tx.delete(artifactFiles).where(inArray(artifactFiles.seq, files.deletes))
  for (const { seq, set } of files.updates)
    await tx.update(artifactFiles).set(set).where(eq(artifactFiles.seq, seq))
  for (const values of files.inserts) await tx.insert(artifactFiles).values(values)
  if (touch) await tx.update(catalogEntries).set({ updated_at: now }).where(eq(catalogEntries.id, entry.id))
  return { result, renamedFrom: row.rename?.id, note: row.note }
}

export function postgresCatalogue(db: PgDb): CatalogueStore {
  const cache = new CatalogueCache(async () => {
    const [entries, profiles, artifacts] = await Promise.all([
      db.select(read.entries).from(catalogEntries).orderBy(asc(catalogEntries.seq)),
      db.select(read.profiles).from(servingProfiles).orderBy(asc(servingProfiles.seq)),
      db.select(read.artifacts).from(artifactFiles).orderBy(asc(artifactFiles.seq)),
    ])
    return { entries, profiles, artifacts }
  })
  return {
    async upsertEntries(entries, now, audit) {
      try {
        return await db.transaction(async (tx) => {
          await tx.execute(sql`SELECT pg_advisory_xact_lock(${SEED_LOCK})`)
          const out: UpsertOutcome[] = []
          for (const e of entries) out.push(await upsertEntry(tx, e, now))
          await appendAudit(tx, audit, catalogueSeeded(entries, out), now)
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
