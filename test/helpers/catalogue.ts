import type { Server } from '../../src/compose'
import type { CatalogEntryRow } from '../../src/db/schema'
import type { ArtifactFile, CatalogueEntry, Engine, ServingProfile } from '../../src/domain/catalogue'
import { normalizeDigest } from '../../src/lib/digest'
import { upsertCatalogue } from '../../src/modules/catalogue/seed'

// Catalogue builders for any workstream's tests. Entries are written through the same function
// that seeding uses (upsertCatalogue), so they look exactly like seeded ones (derived profile included).

/** What every test entry is unless told otherwise: public, active, enabled, no provenance. */
const PUBLIC_ACTIVE = {
  lineage: null,
  source_type: null,
  source_ref: null,
  source_revision: null,
  homepage_url: null,
  org_id: null,
  status: 'active',
  enabled: true,
  renamed_from: null,
} satisfies Partial<CatalogueEntry>

/**
 * A manifest entry as the store's upsertEntries takes it (store tests, below the seeding code): an
 * ollama chat model with one derived profile, `o` overriding any field.
 */
export function manifestEntry(id: string, o: Partial<CatalogueEntry> = {}): CatalogueEntry {
  return {
    id,
    display_name: id,
    runtime: 'ollama',
    runtime_model_id: `${id}:latest`,
    digest: null,
    quantization: 'Q4_K_M',
    parameter_size: '8B',
    context_length: 8192,
    vram_gb: 8,
    size_gb: 5,
    task_type: 'chat',
    capabilities: { tools: true },
    ...PUBLIC_ACTIVE,
    serving_profiles: [{ runtime: 'ollama', runtime_model_id: `${id}:latest`, params: {}, derived: true }],
    artifact_files: [],
    ...o,
  }
}

export type CatalogEntryInput = Partial<Omit<CatalogueEntry, 'serving_profiles' | 'artifact_files'>> & {
  /** Explicit profiles; when absent, one is derived from runtime/runtime_model_id (docs/api.md §4). */
  serving_profiles?: { runtime: Engine; runtime_model_id: string; params?: Record<string, unknown> }[]
  artifact_files?: { path: string; sha256: string; size_bytes?: number | null }[]
}

let counter = 0

/**
 * Inserts (or updates) a catalogue entry: public, enabled, active, task `chat`, served by ollama
 * as `<id>:latest` unless told otherwise. Digests may be given in any accepted spelling.
 */
export async function makeCatalogEntry(
  deps: Server,
  partial: CatalogEntryInput = {},
): Promise<CatalogEntryRow> {
  const id = partial.id ?? `test-model-${++counter}`
  const explicit: ServingProfile[] = (partial.serving_profiles ?? []).map((p) => ({
    runtime: p.runtime,
    runtime_model_id: p.runtime_model_id,
    params: p.params ?? {},
    derived: false,
  }))
  const runtime = partial.runtime ?? explicit[0]?.runtime ?? 'ollama'
  const runtime_model_id = partial.runtime_model_id ?? explicit[0]?.runtime_model_id ?? `${id}:latest`
  const serving_profiles: ServingProfile[] = explicit.length
    ? explicit
    : [{ runtime, runtime_model_id, params: {}, derived: true }]
  const artifact_files: ArtifactFile[] = (partial.artifact_files ?? []).map((f) => ({
    path: f.path,
    sha256: digest(f.sha256),
    size_bytes: f.size_bytes ?? null,
  }))
  const entry: CatalogueEntry = {
    display_name: id,
    quantization: null,
    parameter_size: null,
    context_length: null,
    vram_gb: null,
    size_gb: null,
    task_type: 'chat',
    capabilities: {},
    ...PUBLIC_ACTIVE,
    ...partial,
    id,
    runtime,
    runtime_model_id,
    digest: partial.digest ? digest(partial.digest) : null,
    serving_profiles,
    artifact_files,
  }
  const now = deps.clock.now()
  await upsertCatalogue(deps, [entry], now)
  return (await deps.store.catalogue.entry(id))!
}

function digest(value: string): string {
  const d = normalizeDigest(value)
  if (d === null) throw new Error(`makeCatalogEntry: "${value}" is not a sha256 digest`)
  return d
}

/** A valid 64-hex digest derived from a label, for tests that need distinct pins. */
export const fakeDigest = (label: string) => new Bun.CryptoHasher('sha256').update(label).digest('hex')
