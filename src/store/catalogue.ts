import type { ArtifactFileRow, CatalogEntryRow, ServingProfileRow } from '../db/schema'
import type { AuditContext } from '../domain/audit'
import type { CatalogueEntry as ManifestEntry } from '../domain/catalogue'

// The model catalogue's verbs (docs/api.md §12): the seed upsert at start (docs/api.md §4 catalogue rules 5 and 7), what
// the matching predicate reads, and what a user may see (GET /v1/models). The decisions — which
// fields are managed, when a rename applies, visibility — are decided above the seam
// (src/domain/catalogue-upsert.ts, modules/catalogue/view.ts; docs/api.md §4 catalogue rules 7 and 10); an engine carries them out.

/** How seeding left one entry (docs/api.md §4 catalogue rule 7), with a rename it did or could not do (rule 5). */
export interface UpsertOutcome {
  result: 'inserted' | 'updated' | 'unchanged'
  renamedFrom?: string
  note?: string
}

/** The columns the matching predicate reads of each catalogue table (CatalogueRows). */
export const CATALOGUE_COLUMNS = {
  entries: [
    'id',
    'renamed_from',
    'enabled',
    'org_id',
    'display_name',
    'parameter_size',
    'vram_gb',
    'size_gb',
    'digest',
    'runtime',
    'runtime_model_id',
    'task_type',
    'capabilities',
    'source_type',
    'source_ref',
    'source_revision',
  ],
  profiles: ['catalog_id', 'runtime', 'runtime_model_id', 'params'],
  artifacts: ['catalog_id', 'path', 'sha256', 'size_bytes'],
} as const

type Read<K extends keyof typeof CATALOGUE_COLUMNS> = (typeof CATALOGUE_COLUMNS)[K][number]

/** Everything the matching predicate reads about the catalogue, in seq order. */
export interface CatalogueRows {
  entries: Pick<CatalogEntryRow, Read<'entries'>>[]
  profiles: Pick<ServingProfileRow, Read<'profiles'>>[]
  /** In seq order: a download fetches them in manifest order (docs/api.md §7 pull_models). */
  artifacts: Pick<ArtifactFileRow, Read<'artifacts'>>[]
}

export interface CatalogueStore {
  /**
   * docs/api.md §4 catalogue rule 7: upserts valid manifest entries with their serving profiles and artifact files,
   * all in one transaction; a one-shot rename (rule 5) moves the row and its child rows in place.
   * A `catalogue.seeded` entry names what changed (none when nothing did).
   */
  upsertEntries(entries: ManifestEntry[], now: number, audit: AuditContext): Promise<UpsertOutcome[]>
  /** The stored entry `id`, whatever its visibility. */
  entry(id: string): Promise<CatalogEntryRow | undefined>
  /**
   * What the matching predicate reads (workers/matching.ts loadCatalogue), on every poll. Kept in
   * memory (CatalogueCache) until this engine's upsertEntries, forgetCatalogue(), or at most
   * CATALOGUE_REREAD_MS: the same object comes back while nothing changed, so callers may memoize
   * what they derive from it.
   */
  readCatalogue(): Promise<CatalogueRows>
  /**
   * Every enabled entry, in byte order of id: what GET /v1/models and the validator choose from
   * (who may select which is the catalogue module's rule, catalogue/view.ts).
   */
  enabledEntries(): Promise<CatalogEntryRow[]>
  /**
   * Another instance changed the catalogue (its `models_changed` signal with scope `catalogue`,
   * docs/api.md §12): the next readCatalogue() reads the database.
   */
  forgetCatalogue(): void
}

/**
 * The safety net under the signals (ARCHITECTURE.md rule 15: NOTIFY is a hint, the table is the truth): a
 * lost `models_changed` signal (scope `catalogue`) delays a change on the other instances by at most this long.
 */
export const CATALOGUE_REREAD_MS = 30_000

/**
 * The catalogue rows of one engine instance, read once and kept until forgotten. A read that began
 * before a forget() keeps its rows to itself: they may predate the change.
 */
export class CatalogueCache {
  private rows: Promise<CatalogueRows> | undefined
  private readAt = 0
  private generation = 0

  constructor(private readonly read: () => Promise<CatalogueRows>) {}

  get(): Promise<CatalogueRows> {
    if (this.rows && performance.now() - this.readAt < CATALOGUE_REREAD_MS) return this.rows
    const generation = this.generation
    const rows = this.read()
    this.rows = rows
    this.readAt = performance.now()
    rows.then(
      () => {
        if (this.generation !== generation && this.rows === rows) this.rows = undefined
      },
      () => {
        if (this.rows === rows) this.rows = undefined
      },
    )
    return rows
  }

  forget() {
    this.generation++
    this.rows = undefined
  }
}
