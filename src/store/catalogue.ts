import type { ArtifactFileRow, CatalogEntryRow, ServingProfileRow } from '../db/schema'
import type { CatalogueEntry as ManifestEntry } from '../modules/catalogue/manifest'

// The model catalogue's verbs (API.md §12): the seed upsert at start (SPEC §2 rules 5 and 7), what
// the matching predicate reads, and what a user may see (GET /v1/models). The decisions — which
// fields are managed, when a rename applies, visibility — are the catalogue module's
// (catalogue/upsert.ts, catalogue/view.ts; SPEC §4 Models rules 7 and 10); an engine carries them out.

/** How seeding left one entry (SPEC rule 7), with a rename it did or could not do (rule 5). */
export interface UpsertOutcome {
  result: 'inserted' | 'updated' | 'unchanged'
  renamedFrom?: string
  note?: string
}

/** Everything the matching predicate reads about the catalogue, in seq order. */
export interface CatalogueRows {
  entries: Pick<
    CatalogEntryRow,
    | 'id'
    | 'renamed_from'
    | 'enabled'
    | 'org_id'
    | 'display_name'
    | 'parameter_size'
    | 'vram_gb'
    | 'size_gb'
    | 'digest'
    | 'runtime'
    | 'runtime_model_id'
  >[]
  profiles: Pick<ServingProfileRow, 'catalog_id' | 'runtime' | 'runtime_model_id' | 'params'>[]
  artifacts: Pick<ArtifactFileRow, 'catalog_id' | 'sha256'>[]
}

export interface CatalogueStore {
  /**
   * SPEC rule 7: upserts valid manifest entries with their serving profiles and artifact files,
   * all in one transaction; a one-shot rename (rule 5) moves the row and its child rows in place.
   */
  upsertEntries(entries: ManifestEntry[], now: number): Promise<UpsertOutcome[]>
  /** The stored entry `id`, whatever its visibility. */
  entry(id: string): Promise<CatalogEntryRow | undefined>
  /** What the matching predicate reads (workers/matching.ts loadCatalogue). */
  readCatalogue(): Promise<CatalogueRows>
  /**
   * Every enabled entry, in byte order of id: what GET /v1/models and the validator choose from
   * (who may select which is the catalogue module's rule, catalogue/view.ts).
   */
  enabledEntries(): Promise<CatalogEntryRow[]>
}
