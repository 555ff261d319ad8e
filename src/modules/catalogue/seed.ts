// The copy of the manifest built into the binary: used when no manifest file is found at start.
import embeddedManifest from '../../../catalogue/models.yaml' with { type: 'text' }
import type { Config } from '../../config'
import type { Deps } from '../../deps'
import type { CatalogueEntry } from '../../domain/catalogue'
import { log } from '../../lib/logger'
import { checkManifest, type Notice, type Violation } from './manifest'
import type { CatalogueState } from './view'
import { modelsChanged } from './view'

// docs/api.md §4 catalogue rule 7: at every start the catalogue is upserted from the version-controlled manifest.
// New ids are inserted, managed fields of existing ids updated, entries absent from the manifest
// left untouched. An entry breaking rules 1–3 (or malformed) is logged and skipped; startup never
// fails because of the manifest (rule 4). An entry is never skipped for its params (docs/api.md §4
// params): a param in error is logged and left out, an unknown one an open-ended engine may know is
// logged and kept. Editing the file changes nothing until the next seed.

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
  /** What was said of kept entries' params: errors (left out) and warnings (kept). */
  params: Notice[]
  /** Renames that could not happen, with the reason (the entry itself was still upserted). */
  notes: { id: string; message: string }[]
}

/** Reads the manifest named by the configuration and applies it. Never throws for a bad manifest. */
export async function seedCatalogue(deps: Deps & CatalogueState): Promise<SeedReport> {
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
export async function applyManifest(
  deps: Deps & CatalogueState,
  text: string,
  source: string,
): Promise<SeedReport> {
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
  const skipped = new Set(checked.violations.map((v) => v.index))
  report.params = checked.notices.filter((n) => !skipped.has(n.index))
  for (const n of report.params) {
    const fields = { source, index: n.index, id: n.id, message: n.message }
    if (n.level === 'error') log.error('catalogue param left out', fields)
    else log.warn('catalogue param kept though unknown', fields)
  }
  const now = deps.clock.now()
  const outcomes = await upsertCatalogue(deps, checked.entries, now)
  checked.entries.forEach((entry, i) => {
    const outcome = outcomes[i]!
    if (outcome.renamedFrom) report.renamed.push({ from: outcome.renamedFrom, to: entry.id })
    if (outcome.note) report.notes.push({ id: entry.id, message: outcome.note })
    report[outcome.result].push(entry.id)
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

/**
 * docs/api.md §4 catalogue rule 7's upsert of valid entries; what GET /v1/models and the validator keep is then read
 * afresh, here and on the other instances (catalogue/view.ts).
 */
export async function upsertCatalogue(deps: Deps & CatalogueState, entries: CatalogueEntry[], now: number) {
  const outcomes = await deps.store.catalogue.upsertEntries(entries, now)
  modelsChanged(deps, 'catalogue')
  return outcomes
}

const emptyReport = (source: string): SeedReport => ({
  source,
  applied: false,
  inserted: [],
  updated: [],
  unchanged: [],
  renamed: [],
  skipped: [],
  params: [],
  notes: [],
})
