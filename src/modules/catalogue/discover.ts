import { createHash } from 'node:crypto'
import { ENGINES, type Engine } from '../../domain/catalogue'
import { digestOrNull } from '../../lib/digest'
import type { CatalogueRows } from '../../store/catalogue'
import type { FleetInventory } from '../../store/fleet'
import { checkManifestDocument, idViolations, isMapping, runtimeNameIn } from './manifest'

// docs/api.md §4 catalogue rule 8: discovery appends staged stubs (enabled: false, status: unverified) for models
// that workers report and no catalogue entry covers. Stubs never become selectable on their own:
// a reviewer completes them and sets enabled: true. Rule 6 holds: worker reports only propose.

/** What identifies an artifact for coverage: its digests, and the runtime names it is served as. */
interface Cover {
  digests: Set<string>
  names: Set<string>
}

export interface ReportedModel {
  name: string
  runtime: Engine
  runtime_model_id: string
  digest: string | null
  size_bytes: number | null
  workers: number
}

export interface Stub {
  id: string
  display_name: string
  runtime: Engine
  runtime_model_id: string
  digest: string | null
  size_gb: number | null
  workers: number
}

export interface Discovery {
  stubs: Stub[]
  /** Reported models that cannot be staged, with the reason. */
  unusable: { name: string; reason: string }[]
}

// The poll's matching (docs/api.md §7 Poll rule 4): by digest when both sides carry one, else by name.
const covers = (c: Cover, m: { name: string; runtime_model_id: string; digest: string | null }) =>
  m.digest !== null && c.digests.size > 0
    ? c.digests.has(m.digest)
    : c.names.has(m.name) || c.names.has(m.runtime_model_id)

/** Stubs for every model workers report that neither the database nor the manifest covers. */
export function discover(
  catalogue: CatalogueRows,
  inventory: FleetInventory,
  manifestDoc: unknown,
): Discovery {
  const { covers: known, ids: taken } = knownEntries(catalogue, manifestDoc)
  const { reported, unusable } = reportedModels(inventory)
  const stubs: Stub[] = []
  for (const m of reported) {
    if (known.some((c) => covers(c, m))) continue
    const id = stubId(m.name, m.digest, taken)
    taken.add(id)
    const stub: Stub = {
      id,
      display_name: m.name,
      runtime: m.runtime,
      runtime_model_id: m.runtime_model_id,
      digest: m.digest,
      size_gb: m.size_bytes === null ? null : Math.round(m.size_bytes / 1e7) / 100,
      workers: m.workers,
    }
    stubs.push(stub)
    // Two workers reporting the same new model yield one stub.
    known.push({ digests: new Set(m.digest ? [m.digest] : []), names: new Set([m.runtime_model_id]) })
  }
  return { stubs, unusable }
}

function knownEntries(catalogue: CatalogueRows, manifestDoc: unknown): { covers: Cover[]; ids: Set<string> } {
  const byId = new Map<string, Cover>()
  const ids = new Set<string>()
  const coverOf = (id: string) => {
    let c = byId.get(id)
    if (!c) {
      c = { digests: new Set(), names: new Set() }
      byId.set(id, c)
    }
    return c
  }
  const addDigest = (c: Cover, d: unknown) => {
    const n = typeof d === 'string' ? digestOrNull(d) : null
    if (n) c.digests.add(n)
  }
  const addName = (c: Cover, n: unknown) => {
    if (typeof n === 'string' && n) c.names.add(n)
  }

  for (const e of catalogue.entries) {
    ids.add(e.id)
    if (e.renamed_from) ids.add(e.renamed_from)
    const c = coverOf(`db:${e.id}`)
    addDigest(c, e.digest)
    addName(c, e.runtime_model_id)
  }
  for (const p of catalogue.profiles) addName(coverOf(`db:${p.catalog_id}`), p.runtime_model_id)
  for (const f of catalogue.artifacts) addDigest(coverOf(`db:${f.catalog_id}`), f.sha256)

  // Manifest entries count too, valid or not: a stub appended earlier (or an entry still under
  // review) already covers its model, which makes a second discover run append nothing.
  const models = isMapping(manifestDoc) && Array.isArray(manifestDoc.models) ? manifestDoc.models : []
  for (const [i, raw] of models.entries()) {
    if (!isMapping(raw)) continue
    if (typeof raw.id === 'string') ids.add(raw.id)
    if (typeof raw.renamed_from === 'string') ids.add(raw.renamed_from)
    const c = coverOf(`manifest:${i}`)
    addDigest(c, raw.digest)
    addName(c, raw.runtime_model_id)
    for (const p of Array.isArray(raw.serving_profiles) ? raw.serving_profiles : []) {
      if (isMapping(p)) addName(c, p.runtime_model_id)
    }
    for (const f of Array.isArray(raw.artifact_files) ? raw.artifact_files : []) {
      if (isMapping(f)) addDigest(c, f.sha256)
    }
  }
  return { covers: [...byId.values()], ids }
}

function reportedModels(inventory: FleetInventory): {
  reported: ReportedModel[]
  unusable: Discovery['unusable']
} {
  const enginesOf = new Map<string, string[]>()
  for (const r of inventory.runtimes) {
    enginesOf.set(r.worker_id, [...(enginesOf.get(r.worker_id) ?? []), r.engine])
  }
  const byKey = new Map<string, ReportedModel & { workerIds: Set<string> }>()
  const unusable = new Map<string, string>()
  for (const row of inventory.models) {
    // A row without its engine belongs to the worker's only runtime, if it has exactly one.
    const engines = enginesOf.get(row.worker_id) ?? []
    const runtime = row.runtime ?? (engines.length === 1 ? engines[0]! : null)
    if (runtime === null) {
      unusable.set(row.name, 'the runtime serving it is unknown')
      continue
    }
    if (!(ENGINES as readonly string[]).includes(runtime)) {
      unusable.set(row.name, `runtime "${runtime}" is not an engine gridkeep knows`)
      continue
    }
    const digest = digestOrNull(row.digest)
    const runtime_model_id = row.runtime_model_id ?? row.name
    const key = digest ?? `${runtime}\u0000${runtime_model_id}`
    const seen = byKey.get(key)
    if (seen) {
      seen.workerIds.add(row.worker_id)
      seen.size_bytes ??= row.size_bytes
      continue
    }
    byKey.set(key, {
      name: row.name,
      runtime: runtime as Engine,
      runtime_model_id,
      digest,
      size_bytes: row.size_bytes,
      workers: 0,
      workerIds: new Set([row.worker_id]),
    })
  }
  const reported = [...byKey.values()]
    .map(({ workerIds, ...m }) => ({ ...m, workers: workerIds.size }))
    .sort((a, b) => a.name.localeCompare(b.name) || (a.digest ?? '').localeCompare(b.digest ?? ''))
  return { reported, unusable: [...unusable].map(([name, reason]) => ({ name, reason })) }
}

const shortHash = (s: string) => createHash('sha256').update(s).digest('hex')

/** An id for a stub that satisfies docs/api.md §4 catalogue rules 1–3 and is not taken. */
export function stubId(name: string, digest: string | null, taken: Set<string>): string {
  const fingerprint = digest ?? shortHash(name)
  const segments = name
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((s) => s && !runtimeNameIn(s))
  let id = segments.join('-').slice(0, 96).replace(/-+$/, '')
  // Hex never spells a runtime name, so the fallback always satisfies rule 3.
  if (!id || idViolations(id, null).length > 0) id = `model-${fingerprint.slice(0, 12)}`
  if (taken.has(id)) id = `${id}-${fingerprint.slice(0, 8)}`
  const base = id
  for (let n = 2; taken.has(id); n++) id = `${base}-${n}`
  return id
}

const scalar = (v: string | number | boolean | null) =>
  typeof v === 'string' ? JSON.stringify(v) : String(v)

/** YAML text of the stubs, as list items at `indent`. */
export function renderStubs(stubs: Stub[], indent: string): string {
  const at = `${indent}  `
  return stubs
    .map((s) => {
      const fields: [string, string | number | boolean | null][] = [
        ['display_name', s.display_name],
        ['task_type', null],
        ['quantization', null],
        ['parameter_size', null],
        ['context_length', null],
        ['vram_gb', null],
        ['size_gb', s.size_gb],
        ['digest', s.digest],
        ['capabilities', null],
        ['lineage', null],
        ['source_type', null],
        ['source_ref', null],
        ['source_revision', null],
        ['homepage_url', null],
        ['runtime', s.runtime],
        ['runtime_model_id', s.runtime_model_id],
        ['status', 'unverified'],
        ['enabled', false],
      ]
      return [
        `${indent}# Staged by \`gridkeep catalogue discover\`: reported by ${s.workers} worker(s).`,
        `${indent}# Review and complete it, rename the id if needed, then set enabled: true.`,
        `${indent}- id: ${s.id}`,
        ...fields.map(([k, v]) => `${at}${k}: ${scalar(v)}`),
      ].join('\n')
    })
    .join('\n\n')
}

export type AppendResult = { ok: true; text: string } | { ok: false; error: string }

/**
 * The manifest text with the stubs appended under `models`, existing text and comments kept as
 * they are. Refuses (rather than corrupt the file) when the result would not list the stubs.
 */
export function appendStubs(text: string, stubs: Stub[]): AppendResult {
  if (stubs.length === 0) return { ok: true, text }
  const lines = text.split('\n')
  const modelsAt = lines.findIndex((l) => /^models:\s*(#.*)?$/.test(l))
  let base = text
  if (modelsAt === -1) {
    // An empty or comments-only file gets its `models:` key; anything else is left to a human.
    if (!isBlankYaml(text))
      return { ok: false, error: 'the manifest has no block `models:` line to append to' }
    base = `${text.replace(/\n*$/, '\n').replace(/^\n$/, '')}models:\n`
  }
  const item = lines.slice(modelsAt + 1).find((l) => /^\s*- /.test(l))
  const indent = item ? /^(\s*)/.exec(item)![1]! : '  '
  const next = `${base.replace(/\n*$/, '\n')}\n${renderStubs(stubs, indent)}\n`

  // The appended text must still be the same manifest plus exactly these valid stubs.
  let doc: unknown
  try {
    doc = Bun.YAML.parse(next)
  } catch (e) {
    return { ok: false, error: `appending would break the YAML: ${(e as Error).message}` }
  }
  const checked = checkManifestDocument(doc)
  const appended = new Set(stubs.map((s) => s.id))
  const listed = isMapping(doc) && Array.isArray(doc.models) ? doc.models : []
  const found = listed.filter((m) => isMapping(m) && typeof m.id === 'string' && appended.has(m.id)).length
  if (!checked.ok || found !== stubs.length) {
    return { ok: false, error: '`models` must be the last top-level key of the manifest to append stubs' }
  }
  const bad = checked.violations.filter((v) => v.id !== null && appended.has(v.id))
  if (bad.length) return { ok: false, error: `a stub is invalid: ${bad[0]!.message}` }
  return { ok: true, text: next }
}

function isBlankYaml(text: string): boolean {
  try {
    return Bun.YAML.parse(text) == null
  } catch {
    return false
  }
}
