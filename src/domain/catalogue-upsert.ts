import type { ArtifactFileRow, CatalogEntryRow, ServingProfileRow } from '../db/schema'
import type { ArtifactFile, CatalogueEntry, ServingProfile } from './catalogue'

// The seed upsert's decisions (docs/api.md §4 catalogue rules 5 and 7), taken once here; each storage engine
// (src/store/*/catalogue.ts) reads the stored rows, asks these functions, and applies the answer
// inside its own transaction.

/** Every field the manifest states is managed: removing one from the manifest clears it. */
export function managedFields(e: CatalogueEntry) {
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

export function differs(row: CatalogEntryRow, fields: ReturnType<typeof managedFields>): boolean {
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

/**
 * docs/api.md §4 catalogue rule 5, given the stored rows under the new id and under `renamed_from`: the old row is
 * renamed in place only when the new id is not taken (then batches keep the old slug).
 */
export function renameDecision(
  entry: CatalogueEntry,
  existing: CatalogEntryRow | undefined,
  old: CatalogEntryRow | undefined,
): { rename: CatalogEntryRow | null; note?: string } {
  if (entry.renamed_from === null) return { rename: null }
  if (!existing && old) return { rename: old }
  if (existing && old) {
    return {
      rename: null,
      note: `both "${entry.renamed_from}" and "${entry.id}" exist; "${entry.renamed_from}" was left untouched`,
    }
  }
  // Neither exists: a fresh insert. Only the new id exists: the rename happened at an earlier seed.
  return { rename: null }
}

/** Child-row changes that bring stored rows to what the manifest states. */
export interface ChildChanges<Want> {
  deletes: number[]
  updates: { seq: number; want: Want }[]
  inserts: Want[]
}

function childChanges<Row extends { seq: number }, Want>(
  stored: Row[],
  wanted: Map<string, Want>,
  keyOf: (r: Row) => string,
  same: (r: Row, w: Want) => boolean,
): ChildChanges<Want> {
  const out: ChildChanges<Want> = { deletes: [], updates: [], inserts: [] }
  const left = new Map(wanted)
  for (const row of stored) {
    const want = left.get(keyOf(row))
    if (!want) out.deletes.push(row.seq)
    else if (!same(row, want)) out.updates.push({ seq: row.seq, want })
    left.delete(keyOf(row))
  }
  out.inserts = [...left.values()]
  return out
}

/** docs/api.md §4: one profile per (entry, runtime); adding a runtime adds a profile, never an entry. */
export const profileChanges = (stored: ServingProfileRow[], entry: CatalogueEntry) =>
  childChanges<ServingProfileRow, ServingProfile>(
    stored,
    new Map(entry.serving_profiles.map((p) => [p.runtime as string, p])),
    (r) => r.runtime,
    (r, w) =>
      r.runtime_model_id === w.runtime_model_id && r.derived === w.derived && sameJson(r.params, w.params),
  )

export const artifactChanges = (stored: ArtifactFileRow[], entry: CatalogueEntry) =>
  childChanges<ArtifactFileRow, ArtifactFile>(
    stored,
    new Map(entry.artifact_files.map((f) => [f.path, f])),
    (r) => r.path,
    (r, w) => r.sha256 === w.sha256 && r.size_bytes === w.size_bytes,
  )

export const hasChanges = (c: ChildChanges<unknown>) =>
  c.deletes.length + c.updates.length + c.inserts.length > 0
