import { eq } from 'drizzle-orm'
// The copy of the manifest built into the binary: used when no manifest file is found at start.
import embeddedManifest from '../../../catalogue/models.yaml' with { type: 'text' }
import type { Config } from '../../config'
import { artifactFiles, type CatalogEntryRow, catalogEntries, servingProfiles } from '../../db/schema'
import type { Tx } from '../../db/tx'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { log } from '../../lib/logger'
import { type CatalogueEntry, checkManifest, type Violation } from './manifest'

// SPEC rule 7: at every start the catalogue is upserted from the version-controlled manifest.
// New ids are inserted, managed fields of existing ids updated, entries absent from the manifest
// left untouched. An entry breaking rules 1–3 (or malformed) is logged and skipped; startup never
// fails because of the manifest (rule 4). Editing the file changes nothing until the next seed.

export const DEFAULT_CATALOGUE_PATH = 'catalogue/models.yaml'

export interface SeedReport {
  /** Where the manifest came from: a path, or `embedded`. */
  source: string
  /** false when no manifest could be used at all; the stored catalogue was kept as it was. */
  applied: boolean
  error?: string
  inserted: string[]
  updated: string[]
  unchanged: string[]
  renamed: { from: string; to: string }[]
  skipped: Violation[]
  /** Renames that could not happen, with the reason (the entry itself was still upserted). */
  notes: { id: string; message: string }[]
}

/** Reads the manifest named by the configuration and applies it. Never throws for a bad manifest. */
export async function seedCatalogue(deps: Deps): Promise<SeedReport> {
  const found = await readManifest(deps.config)
  if ('error' in found) {
    log.error('catalogue manifest unusable; stored catalogue kept', {
      source: found.source,
      error: found.error,
    })
    return { ...emptyReport(found.source), error: found.error }
  }
  return applyManifest(deps, found.text, found.source)
}

async function readManifest(
  config: Pick<Config, 'CATALOGUE_PATH'>,
): Promise<{ text: string; source: string } | { error: string; source: string }> {
  const explicit = config.CATALOGUE_PATH
  const path = explicit ?? DEFAULT_CATALOGUE_PATH
  try {
    const file = Bun.file(path)
    if (await file.exists()) return { text: await file.text(), source: path }
  } catch (e) {
    return { error: `cannot read: ${(e as Error).message}`, source: path }
  }
  // A path the operator named must exist; only the default falls back to the built-in copy.
  if (explicit !== undefined) return { error: 'file not found', source: path }
  return { text: embeddedManifest, source: 'embedded' }
}

/** Validates `text` and upserts its valid entries in one transaction. */
export function applyManifest(deps: Deps, text: string, source: string): SeedReport {
  const report = emptyReport(source)
  const checked = checkManifest(text)
  if (!checked.ok) {
    log.error('catalogue manifest unusable; stored catalogue kept', { source, error: checked.error })
    return { ...report, error: checked.error }
  }
  for (const v of checked.violations) {
    log.warn('catalogue entry skipped', {
      source,
      index: v.index,
      id: v.id,
      rule: v.rule,
      message: v.message,
    })
  }
  report.skipped = checked.violations
  const now = deps.clock.now()
  writeTx(deps.db, (tx) => {
    for (const entry of checked.entries) {
      const outcome = storeEntry(tx, entry, now)
      if (outcome.renamedFrom) report.renamed.push({ from: outcome.renamedFrom, to: entry.id })
      if (outcome.note) report.notes.push({ id: entry.id, message: outcome.note })
      report[outcome.result].push(entry.id)
    }
  })
  report.applied = true
  for (const r of report.renamed) log.info('catalogue entry renamed', { source, from: r.from, to: r.to })
  for (const n of report.notes)
    log.warn('catalogue rename not applied', { source, id: n.id, message: n.message })
  log.info('catalogue seeded', {
    source,
    inserted: report.inserted.length,
    updated: report.updated.length,
    unchanged: report.unchanged.length,
    renamed: report.renamed.length,
    skipped: report.skipped.length,
  })
  return report
}

const emptyReport = (source: string): SeedReport => ({
  source,
  applied: false,
  inserted: [],
  updated: [],
  unchanged: [],
  renamed: [],
  skipped: [],
  notes: [],
})

interface StoreOutcome {
  result: 'inserted' | 'updated' | 'unchanged'
  renamedFrom?: string
  note?: string
}

/**
 * Upserts one valid entry with its serving profiles and artifact files. Used by seeding and by the
 * test builders, so stored entries always have the shape seeding gives them.
 */
export function storeEntry(tx: Tx, entry: CatalogueEntry, now: number): StoreOutcome {
  const byId = (id: string) => tx.select().from(catalogEntries).where(eq(catalogEntries.id, id)).get()
  let existing = byId(entry.id)
  let renamedFrom: string | undefined
  let note: string | undefined

  if (entry.renamed_from !== null) {
    const old = byId(entry.renamed_from)
    if (!existing && old) {
      // SPEC rule 5: the row and its child rows are updated in place (child FKs are ON UPDATE
      // CASCADE). batches.model is left alone: stored batches keep the old slug.
      tx.update(catalogEntries).set({ id: entry.id }).where(eq(catalogEntries.seq, old.seq)).run()
      existing = { ...old, id: entry.id }
      renamedFrom = old.id
    } else if (existing && old) {
      note = `both "${entry.renamed_from}" and "${entry.id}" exist; "${entry.renamed_from}" was left untouched`
    }
    // Neither exists: a fresh insert. Only the new id exists: the rename happened at an earlier seed.
  }

  const fields = managedFields(entry)
  let result: StoreOutcome['result']
  if (!existing) {
    tx.insert(catalogEntries)
      .values({ id: entry.id, ...fields, created_at: now, updated_at: now })
      .run()
    result = 'inserted'
  } else {
    const rowChanged = differs(existing, fields)
    if (rowChanged) {
      tx.update(catalogEntries)
        .set({ ...fields, updated_at: now })
        .where(eq(catalogEntries.id, entry.id))
        .run()
    }
    result = rowChanged || renamedFrom ? 'updated' : 'unchanged'
  }
  const profilesChanged = syncProfiles(tx, entry)
  const filesChanged = syncArtifactFiles(tx, entry)
  if ((profilesChanged || filesChanged) && result === 'unchanged') {
    tx.update(catalogEntries).set({ updated_at: now }).where(eq(catalogEntries.id, entry.id)).run()
    result = 'updated'
  }
  return { result, renamedFrom, note }
}

// Every field the manifest states is managed: removing one from the manifest clears it.
function managedFields(e: CatalogueEntry) {
  return {
    display_name: e.display_name,
    runtime: e.runtime,
    runtime_model_id: e.runtime_model_id,
    digest: e.digest,
    quantization: e.quantization,
    parameter_size: e.parameter_size,
    context_length: e.context_length,
    vram_gb: e.vram_gb,
    size_gb: e.size_gb,
    task_type: e.task_type,
    capabilities: e.capabilities,
    lineage: e.lineage,
    source_type: e.source_type,
    source_ref: e.source_ref,
    source_revision: e.source_revision,
    homepage_url: e.homepage_url,
    org_id: e.org_id,
    status: e.status,
    enabled: e.enabled,
    renamed_from: e.renamed_from,
  }
}

function differs(row: CatalogEntryRow, fields: ReturnType<typeof managedFields>): boolean {
  return Object.entries(fields).some(([k, v]) => !sameJson((row as unknown as Record<string, unknown>)[k], v))
}

// Key order of JSON objects does not matter for equality.
const canonical = (v: unknown): unknown =>
  v && typeof v === 'object' && !Array.isArray(v)
    ? Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k, canonical((v as Record<string, unknown>)[k])]),
      )
    : Array.isArray(v)
      ? v.map(canonical)
      : v
const sameJson = (a: unknown, b: unknown) => JSON.stringify(canonical(a)) === JSON.stringify(canonical(b))

/** SPEC §2: one profile per (entry, runtime); adding a runtime adds a profile, never an entry. */
function syncProfiles(tx: Tx, entry: CatalogueEntry): boolean {
  const stored = tx.select().from(servingProfiles).where(eq(servingProfiles.catalog_id, entry.id)).all()
  const wanted = new Map(entry.serving_profiles.map((p) => [p.runtime as string, p]))
  let changed = false
  for (const row of stored) {
    const want = wanted.get(row.runtime)
    if (!want) {
      tx.delete(servingProfiles).where(eq(servingProfiles.seq, row.seq)).run()
      changed = true
    } else if (
      row.runtime_model_id !== want.runtime_model_id ||
      row.derived !== want.derived ||
      !sameJson(row.params, want.params)
    ) {
      tx.update(servingProfiles)
        .set({ runtime_model_id: want.runtime_model_id, params: want.params, derived: want.derived })
        .where(eq(servingProfiles.seq, row.seq))
        .run()
      changed = true
    }
    wanted.delete(row.runtime)
  }
  for (const p of wanted.values()) {
    tx.insert(servingProfiles)
      .values({ catalog_id: entry.id, ...p })
      .run()
    changed = true
  }
  return changed
}

function syncArtifactFiles(tx: Tx, entry: CatalogueEntry): boolean {
  const stored = tx.select().from(artifactFiles).where(eq(artifactFiles.catalog_id, entry.id)).all()
  const wanted = new Map(entry.artifact_files.map((f) => [f.path, f]))
  let changed = false
  for (const row of stored) {
    const want = wanted.get(row.path)
    if (!want) {
      tx.delete(artifactFiles).where(eq(artifactFiles.seq, row.seq)).run()
      changed = true
    } else if (row.sha256 !== want.sha256 || row.size_bytes !== want.size_bytes) {
      tx.update(artifactFiles)
        .set({ sha256: want.sha256, size_bytes: want.size_bytes })
        .where(eq(artifactFiles.seq, row.seq))
        .run()
      changed = true
    }
    wanted.delete(row.path)
  }
  for (const f of wanted.values()) {
    tx.insert(artifactFiles)
      .values({ catalog_id: entry.id, ...f })
      .run()
    changed = true
  }
  return changed
}
