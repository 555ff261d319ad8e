import { asc, eq } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { preparedOnce } from '../../db/prepared'
import { artifactFiles, catalogEntries, servingProfiles } from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import { catalogueSeeded } from '../../domain/audit'
import type { CatalogueEntry as ManifestEntry } from '../../domain/catalogue'
import { childrenPlan, entryRowPlan } from '../../domain/catalogue-upsert'
import { CatalogueCache, type CatalogueStore, type UpsertOutcome } from '../catalogue'
import { catalogueColumns } from '../statements'
import { appendAudit } from './audit'
import type { SqliteDeps } from './deps'

// The catalogue on SQLite. Poll and heartbeat read it through the prepared statements below.

const read = catalogueColumns({
  entries: catalogEntries,
  profiles: servingProfiles,
  artifacts: artifactFiles,
})

const stmts = preparedOnce((db: Db) => ({
  entries: db.select(read.entries).from(catalogEntries).orderBy(asc(catalogEntries.seq)).prepare(),
  profiles: db.select(read.profiles).from(servingProfiles).orderBy(asc(servingProfiles.seq)).prepare(),
  artifacts: db.select(read.artifacts).from(artifactFiles).orderBy(asc(artifactFiles.seq)).prepare(),
  enabled: db
    .select()
    .from(catalogEntries)
    .where(eq(catalogEntries.enabled, true))
    .orderBy(asc(catalogEntries.id))
    .prepare(),
}))

/** One valid manifest entry with its serving profiles and artifact files (docs/api.md §4 catalogue rules 5, 7). */
function upsertEntry(tx: Tx, entry: ManifestEntry, now: number): UpsertOutcome {
  const byId = (id: string) => tx.select().from(catalogEntries).where(eq(catalogEntries.id, id)).get()
  const existing = byId(entry.id)
  const old = entry.renamed_from === null ? undefined : byId(entry.renamed_from)
  const row = entryRowPlan(entry, existing, old, now)
  // Child FKs are ON UPDATE CASCADE: the child rows follow the row.
  if (row.rename)
    tx.update(catalogEntries).set({ id: entry.id }).where(eq(catalogEntries.seq, row.rename.seq)).run()
  if (row.write?.kind === 'insert') tx.insert(catalogEntries).values(row.write.values).run()
  else if (row.write)
    tx.update(catalogEntries).set(row.write.set).where(eq(catalogEntries.id, entry.id)).run()

  const { profiles, files, touch, result } = childrenPlan(
    entry,
    tx.select().from(servingProfiles).where(eq(servingProfiles.catalog_id, entry.id)).all(),
    tx.select().from(artifactFiles).where(eq(artifactFiles.catalog_id, entry.id)).all(),
    row.result,
  )
  for (const seq of profiles.deletes) tx.delete(servingProfiles).where(eq(servingProfiles.seq, seq)).run()
  for (const { seq, set } of profiles.updates)
    tx.update(servingProfiles).set(set).where(eq(servingProfiles.seq, seq)).run()
  for (const values of profiles.inserts) tx.insert(servingProfiles).values(values).run()
  for (const seq of files.deletes) tx.delete(artifactFiles).where(eq(artifactFiles.seq, seq)).run()
  for (const { seq, set } of files.updates)
    tx.update(artifactFiles).set(set).where(eq(artifactFiles.seq, seq)).run()
  for (const values of files.inserts) tx.insert(artifactFiles).values(values).run()
  if (touch) tx.update(catalogEntries).set({ updated_at: now }).where(eq(catalogEntries.id, entry.id)).run()
  return { result, renamedFrom: row.rename?.id, note: row.note }
}

export function sqliteCatalogue(deps: SqliteDeps): CatalogueStore {
  const { db } = deps
  const cache = new CatalogueCache(async () => {
    const s = stmts(deps)
    return { entries: s.entries.all(), profiles: s.profiles.all(), artifacts: s.artifacts.all() }
  })
  return {
    async upsertEntries(entries, now, audit) {
      try {
        return writeTx(db, (tx) => {
          const outcomes = entries.map((e) => upsertEntry(tx, e, now))
          appendAudit(tx, audit, catalogueSeeded(entries, outcomes), now)
          return outcomes
        })
      } finally {
        cache.forget()
      }
    },
    async entry(id) {
      return db.select().from(catalogEntries).where(eq(catalogEntries.id, id)).get()
    },
    readCatalogue: () => cache.get(),
    forgetCatalogue: () => cache.forget(),
    async enabledEntries() {
      return stmts(deps).enabled.all()
    },
  }
}
