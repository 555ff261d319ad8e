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

export type UpsertResult = 'inserted' | 'updated' | 'unchanged'

/** What happens to one manifest entry's row (docs/api.md §4 catalogue rules 5 and 7). */
export interface EntryRowPlan {
  /** Rename this stored row (by seq) to the entry's id first; its child rows follow (ON UPDATE CASCADE). */
  rename: CatalogEntryRow | null
  write:
    | {
        kind: 'insert'
        values: ReturnType<typeof managedFields> & { id: string; created_at: number; updated_at: number }
      }
    | { kind: 'update'; set: ReturnType<typeof managedFields> & { updated_at: number } }
    | null
  /** The result so far; the child rows may still turn 'unchanged' into 'updated' (childrenPlan). */
  result: UpsertResult
  note?: string
}

/**
 * Given the stored rows under the entry's id and under its `renamed_from`: rename (renameDecision),
 * then insert a new row, or update the managed fields of the stored one when any differs.
 */
export function entryRowPlan(
  entry: CatalogueEntry,
  existing: CatalogEntryRow | undefined,
  old: CatalogEntryRow | undefined,
  now: number,
): EntryRowPlan {
  const { rename, note } = renameDecision(entry, existing, old)
  const stored = rename ?? existing
  const fields = managedFields(entry)
  const withNote = note === undefined ? {} : { note }
  if (!stored) {
    return {
      rename,
      write: { kind: 'insert', values: { id: entry.id, ...fields, created_at: now, updated_at: now } },
      result: 'inserted',
      ...withNote,
    }
  }
  const rowChanged = differs(stored, fields)
  return {
    rename,
    write: rowChanged ? { kind: 'update', set: { ...fields, updated_at: now } } : null,
    result: rowChanged || rename ? 'updated' : 'unchanged',
    ...withNote,
  }
}

/** The child rows' changes, as each engine writes them. */
export interface ChildrenPlan {
  profiles: {
    deletes: number[]
    updates: { seq: number; set: Pick<ServingProfile, 'runtime_model_id' | 'params' | 'derived'> }[]
    inserts: (ServingProfile & { catalog_id: string })[]
  }
  files: {
    deletes: number[]
    updates: { seq: number; set: Pick<ArtifactFile, 'sha256' | 'size_bytes'> }[]
    inserts: (ArtifactFile & { catalog_id: string })[]
  }
  /** Only the child rows changed: the entry's updated_at moves (and the result is 'updated'). */
  touch: boolean
  result: UpsertResult
}

/** Given the entry's stored child rows (read after the row plan is applied) and its row result. */
export function childrenPlan(
  entry: CatalogueEntry,
  storedProfiles: ServingProfileRow[],
  storedFiles: ArtifactFileRow[],
  result: UpsertResult,
): ChildrenPlan {
  const p = profileChanges(storedProfiles, entry)
  const f = artifactChanges(storedFiles, entry)
  const touch = (hasChanges(p) || hasChanges(f)) && result === 'unchanged'
  return {
    profiles: {
      deletes: p.deletes,
      updates: p.updates.map(({ seq, want }) => ({
        seq,
        set: { runtime_model_id: want.runtime_model_id, params: want.params, derived: want.derived },
      })),
      inserts: p.inserts.map((x) => ({ catalog_id: entry.id, ...x })),
    },
    files: {
      deletes: f.deletes,
      updates: f.updates.map(({ seq, want }) => ({
        seq,
        set: { sha256: want.sha256, size_bytes: want.size_bytes },
      })),
      inserts: f.inserts.map((x) => ({ catalog_id: entry.id, ...x })),
    },
    touch,
    result: touch ? 'updated' : result,
  }
}
