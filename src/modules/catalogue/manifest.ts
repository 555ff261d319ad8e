import { type Static, Type as T, type TLiteral, type TSchema } from '@sinclair/typebox'
import { Value, ValueErrorType } from '@sinclair/typebox/value'
import {
  type ArtifactFile,
  type CatalogueEntry,
  ENGINES,
  type ServingProfile,
  STATUSES,
  TASK_TYPES,
} from '../../domain/catalogue'
import { checkParams } from '../../domain/serving-params'
import { normalizeDigest } from '../../lib/digest'

// The catalogue manifest (docs/api.md §4): a YAML document whose top-level key `models` lists the
// entries of docs/api.md §4 "Catalogue entry". This file is the ONE validation used both by seeding at
// startup and by `gridkeep catalogue check`, so the two can never disagree about an entry.

// docs/api.md §4 catalogue rule 3: an id never contains the name of a serving runtime. Ids carry no dots, so the names
// are compared with separators removed on both sides: `llama-cpp`, `lm-studio` and `v-llm` are
// caught as well as `llamacpp`. A plain `llama` is not a runtime name.
const RUNTIME_NAMES = ENGINES.map((e) => e.replace(/[^a-z0-9]/g, ''))

export const MAX_ID_LENGTH = 128
// docs/api.md §4 catalogue rule 1: lowercase [a-z0-9] segments joined by `-`.
const ID_PATTERN = /^[a-z0-9]+(?:-[a-z0-9]+)*$/

const literals = <V extends readonly string[]>(values: V) =>
  T.Union(values.map((v) => T.Literal(v)) as TLiteral<V[number]>[])
const Text = (maxLength: number) => T.String({ minLength: 1, maxLength })
const Nullable = <S extends TSchema>(s: S) => T.Optional(T.Union([s, T.Null()]))

const ServingProfileSchema = T.Object(
  {
    runtime: literals(ENGINES),
    runtime_model_id: Text(512),
    // Platform-owned server-launch settings (docs/api.md §6); per-request sampling stays in batch lines.
    params: Nullable(T.Record(T.String({ maxLength: 128 }), T.Unknown())),
  },
  { additionalProperties: false },
)

const ArtifactFileSchema = T.Object(
  {
    path: Text(1024),
    sha256: Text(80),
    size_bytes: Nullable(T.Integer({ minimum: 0 })),
  },
  { additionalProperties: false },
)

const CapabilitiesSchema = T.Object(
  {
    json_mode: T.Optional(T.Boolean()),
    vision: T.Optional(T.Boolean()),
    embeddings: T.Optional(T.Boolean()),
    logprobs: T.Optional(T.Boolean()),
  },
  { additionalProperties: false },
)

/** One manifest entry as written. Unknown keys are refused: a typo must not pass silently. */
export const ManifestEntrySchema = T.Object(
  {
    id: T.String({ maxLength: MAX_ID_LENGTH }),
    display_name: Nullable(Text(200)),
    runtime: Nullable(literals(ENGINES)),
    runtime_model_id: Nullable(Text(512)),
    digest: Nullable(Text(80)),
    quantization: Nullable(Text(64)),
    parameter_size: Nullable(Text(32)),
    context_length: Nullable(T.Integer({ minimum: 1 })),
    vram_gb: Nullable(T.Number({ minimum: 0 })),
    size_gb: Nullable(T.Number({ minimum: 0 })),
    task_type: Nullable(literals(TASK_TYPES)),
    capabilities: Nullable(CapabilitiesSchema),
    lineage: Nullable(Text(256)),
    source_type: Nullable(Text(64)),
    source_ref: Nullable(Text(512)),
    source_revision: Nullable(Text(256)),
    homepage_url: Nullable(Text(1024)),
    org_id: Nullable(Text(64)),
    status: T.Optional(literals(STATUSES)),
    enabled: T.Optional(T.Boolean()),
    renamed_from: Nullable(Text(MAX_ID_LENGTH)),
    serving_profiles: Nullable(T.Array(ServingProfileSchema, { maxItems: ENGINES.length })),
    artifact_files: Nullable(T.Array(ArtifactFileSchema, { maxItems: 1024 })),
  },
  { additionalProperties: false },
)
type ManifestEntry = Static<typeof ManifestEntrySchema>

/** Which rule an entry breaks: docs/api.md §4 catalogue rules 1–3, or `schema` for a malformed entry. */
export type Rule = 1 | 2 | 3 | 'schema'

export interface Violation {
  /** 0-based position in `models`. */
  index: number
  id: string | null
  rule: Rule
  message: string
}

/**
 * A finding that does not drop its entry (docs/api.md §4 params): an `error` is a param left out of
 * the entry, a `warning` a param kept that the table of its runtime does not know.
 */
export interface Notice {
  index: number
  id: string | null
  level: 'error' | 'warning'
  message: string
}

export type ManifestCheck =
  | { ok: true; total: number; entries: CatalogueEntry[]; violations: Violation[]; notices: Notice[] }
  | { ok: false; error: string }

/** The quant slug of docs/api.md §4 catalogue rule 2: the label lowercased, separators removed ("Q4_K_M" → "q4km"). */
export const quantSlug = (quantization: string) => quantization.toLowerCase().replace(/[^a-z0-9]/g, '')

/** The runtime name an id contains (docs/api.md §4 catalogue rule 3), if any. */
export function runtimeNameIn(id: string): string | undefined {
  const flat = id.toLowerCase().replace(/[^a-z0-9]/g, '')
  return RUNTIME_NAMES.find((name) => flat.includes(name))
}

/** docs/api.md §4 catalogue rules 1–3 for one id. */
export function idViolations(id: string, quantization: string | null): { rule: Rule; message: string }[] {
  const out: { rule: Rule; message: string }[] = []
  if (!ID_PATTERN.test(id)) {
    out.push({ rule: 1, message: `id "${id}" must be lowercase [a-z0-9] segments joined by "-"` })
  }
  if (quantization !== null) {
    const slug = quantSlug(quantization)
    if (!slug) {
      out.push({ rule: 2, message: `quantization "${quantization}" has no letters or digits to form a slug` })
    } else if (id !== slug && !id.endsWith(`-${slug}`)) {
      out.push({
        rule: 2,
        message: `id "${id}" must end with the quant slug "-${slug}" of "${quantization}"`,
      })
    }
  }
  const runtime = runtimeNameIn(id)
  if (runtime) {
    out.push({ rule: 3, message: `id "${id}" contains the runtime name "${runtime}"` })
  }
  return out
}

/** Parses and validates a manifest. Never throws; a document that is unusable as a whole is `ok: false`. */
export function checkManifest(text: string): ManifestCheck {
  let doc: unknown
  try {
    doc = Bun.YAML.parse(text)
  } catch (e) {
    return { ok: false, error: `not valid YAML: ${(e as Error).message}` }
  }
  return checkManifestDocument(doc)
}

export function checkManifestDocument(doc: unknown): ManifestCheck {
  if (!isMapping(doc))
    return { ok: false, error: 'the manifest must be a YAML mapping with the key `models`' }
  if (!('models' in doc)) return { ok: false, error: 'the manifest has no top-level key `models`' }
  const models = doc.models ?? []
  if (!Array.isArray(models)) return { ok: false, error: '`models` must be a list of entries' }

  const entries: CatalogueEntry[] = []
  const violations: Violation[] = []
  const notices: Notice[] = []
  const seenIds = new Map<string, number>()
  const renameSources = new Map<string, number>()
  const checked = models.map((raw, index) => ({ index, ...checkEntry(raw, index) }))
  const allIds = new Set(checked.flatMap((c) => (c.entry ? [c.entry.id] : [])))

  for (const { index, entry, violations: own, notices: said } of checked) {
    violations.push(...own)
    notices.push(...said)
    if (!entry) continue
    const cross: string[] = []
    const first = seenIds.get(entry.id)
    if (first !== undefined) cross.push(`duplicate id "${entry.id}" (first at models[${first}])`)
    if (entry.renamed_from !== null) {
      // docs/api.md §4 catalogue rule 5: a rename is one-shot; the old id cannot also stay a live entry of the manifest.
      if (allIds.has(entry.renamed_from)) {
        cross.push(`renamed_from "${entry.renamed_from}" is still an entry of this manifest`)
      }
      const other = renameSources.get(entry.renamed_from)
      if (other !== undefined) {
        cross.push(`renamed_from "${entry.renamed_from}" is already claimed by models[${other}]`)
      }
    }
    if (cross.length) {
      for (const message of cross) violations.push({ index, id: entry.id, rule: 'schema', message })
      continue
    }
    seenIds.set(entry.id, index)
    if (entry.renamed_from !== null) renameSources.set(entry.renamed_from, index)
    entries.push(entry)
  }
  return { ok: true, total: models.length, entries, violations, notices }
}

function checkEntry(
  raw: unknown,
  index: number,
): { entry?: CatalogueEntry; violations: Violation[]; notices: Notice[] } {
  if (!isMapping(raw)) {
    return {
      violations: [{ index, id: null, rule: 'schema', message: 'an entry must be a mapping' }],
      notices: [],
    }
  }
  const id = typeof raw.id === 'string' ? raw.id : null
  const found: { rule: Rule; message: string }[] = []
  if (id !== null) {
    const quantization = typeof raw.quantization === 'string' ? raw.quantization : null
    found.push(...idViolations(id, quantization))
  }
  for (const message of explain(ManifestEntrySchema, raw)) found.push({ rule: 'schema', message })
  let notices: Notice[] = []
  if (found.length === 0) {
    const built = buildEntry(raw as ManifestEntry)
    notices = built.notes.map((n) => ({ index, id, ...n }))
    if ('entry' in built) return { entry: built.entry, violations: [], notices }
    for (const message of built.problems) found.push({ rule: 'schema', message })
  }
  return { violations: found.map((f) => ({ index, id, ...f })), notices }
}

type Built = { notes: Omit<Notice, 'index' | 'id'>[] } & ({ entry: CatalogueEntry } | { problems: string[] })

/**
 * Applies defaults and the checks a schema cannot express: the entry, or the problems that drop
 * it; and the notes about its params, which never drop it.
 */
function buildEntry(e: ManifestEntry): Built {
  const problems: string[] = []
  const notes: Omit<Notice, 'index' | 'id'>[] = []
  const kept: Record<string, unknown>[] = []
  let digest: string | null = null
  if (e.digest != null) {
    digest = normalizeDigest(e.digest)
    if (digest === null) problems.push(`/digest: "${e.digest}" is not a sha256 digest (64 hex characters)`)
  }

  const artifact_files: ArtifactFile[] = []
  const paths = new Set<string>()
  for (const [i, f] of (e.artifact_files ?? []).entries()) {
    const sha256 = normalizeDigest(f.sha256)
    if (sha256 === null) problems.push(`/artifact_files/${i}/sha256: "${f.sha256}" is not a sha256 digest`)
    if (paths.has(f.path)) problems.push(`/artifact_files/${i}/path: duplicate path "${f.path}"`)
    paths.add(f.path)
    artifact_files.push({ path: f.path, sha256: sha256 ?? '', size_bytes: f.size_bytes ?? null })
  }

  // docs/api.md §4: profiles are unique per (entry, runtime); without explicit ones, one is derived.
  const explicit = e.serving_profiles ?? []
  const runtimes = new Set<string>()
  for (const [i, p] of explicit.entries()) {
    if (runtimes.has(p.runtime))
      problems.push(`/serving_profiles/${i}/runtime: a second profile for "${p.runtime}"`)
    runtimes.add(p.runtime)
    // docs/api.md §4 params: checked where they are written (src/domain/serving-params.ts); a param
    // in error is left out and said, a key only an open-ended engine may know is kept and said.
    const checked = checkParams(p.runtime, p.params ?? {})
    kept.push(checked.params)
    for (const n of checked.notes)
      notes.push({
        level: n.level,
        message: `/serving_profiles/${i}/params (${p.runtime}): ${n.message}${n.level === 'error' ? '; left out' : ''}`,
      })
  }
  const runtime = e.runtime ?? null
  const runtimeModelId = e.runtime_model_id ?? null
  if ((runtime === null) !== (runtimeModelId === null)) {
    problems.push('runtime and runtime_model_id must be given together')
  }
  let serving_profiles: ServingProfile[]
  if (explicit.length > 0) {
    serving_profiles = explicit.map((p, i) => ({
      runtime: p.runtime,
      runtime_model_id: p.runtime_model_id,
      params: kept[i]!,
      derived: false,
    }))
    if (
      runtime !== null &&
      !explicit.some((p) => p.runtime === runtime && p.runtime_model_id === runtimeModelId)
    ) {
      problems.push(
        `runtime "${runtime}" / runtime_model_id "${runtimeModelId}" must match one of its serving_profiles`,
      )
    }
  } else if (runtime !== null && runtimeModelId !== null) {
    serving_profiles = [{ runtime, runtime_model_id: runtimeModelId, params: {}, derived: true }]
  } else {
    serving_profiles = []
    if (runtime === null && runtimeModelId === null) {
      problems.push('an entry needs runtime and runtime_model_id, or serving_profiles')
    }
  }

  const enabled = e.enabled ?? true
  // docs/api.md §4 catalogue rule 8: stubs may leave task_type open, but only a reviewed entry becomes selectable.
  if (enabled && e.task_type == null) problems.push('/task_type: required when the entry is enabled')
  if (e.renamed_from != null && e.renamed_from === e.id) problems.push('/renamed_from: equals the id')
  if (problems.length) return { problems, notes }

  // The deprecated columns stay written (docs/api.md §0): from the entry, else from its first profile.
  const primary = serving_profiles[0]!
  const entry: CatalogueEntry = {
    id: e.id,
    display_name: e.display_name ?? e.id,
    runtime: runtime ?? primary.runtime,
    runtime_model_id: runtimeModelId ?? primary.runtime_model_id,
    digest,
    quantization: e.quantization ?? null,
    parameter_size: e.parameter_size ?? null,
    context_length: e.context_length ?? null,
    vram_gb: e.vram_gb ?? null,
    size_gb: e.size_gb ?? null,
    task_type: e.task_type ?? null,
    capabilities: stripUndefined(e.capabilities ?? {}),
    lineage: e.lineage ?? null,
    source_type: e.source_type ?? null,
    source_ref: e.source_ref ?? null,
    source_revision: e.source_revision ?? null,
    homepage_url: e.homepage_url ?? null,
    org_id: e.org_id ?? null,
    status: e.status ?? 'active',
    enabled,
    renamed_from: e.renamed_from ?? null,
    serving_profiles,
    artifact_files,
  }
  return { entry, notes }
}

const stripUndefined = (o: Record<string, boolean | undefined>): Record<string, boolean> =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Record<string, boolean>

export const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)

// TypeBox reports a nullable field with a wrong value as "Expected union value"; unwrap the
// nullable union so `check` says what was expected where.
function* explain(schema: TSchema, value: unknown, base = ''): Generator<string> {
  const seen = new Set<string>()
  for (const e of Value.Errors(schema, value)) {
    const path = base + e.path
    if (seen.has(path)) continue
    seen.add(path)
    const options = (e.schema as { anyOf?: TSchema[] }).anyOf
    if (e.type === ValueErrorType.Union && options) {
      const nonNull = options.filter((o) => o.type !== 'null')
      if (e.value !== null && nonNull.length === 1 && nonNull.length < options.length) {
        yield* explain(nonNull[0]!, e.value, path)
      } else {
        yield `${path || '/'}: expected ${describe(e.schema)}, got ${JSON.stringify(e.value)}`
      }
    } else if (e.type === ValueErrorType.ObjectAdditionalProperties) {
      yield `${path}: unknown field`
    } else {
      yield `${path || '/'}: ${e.message.toLowerCase()}`
    }
  }
}

function describe(schema: TSchema): string {
  if (schema.anyOf) return (schema.anyOf as TSchema[]).map(describe).join(' or ')
  if (schema.const !== undefined) return JSON.stringify(schema.const)
  const names: Record<string, string> = { object: 'a mapping', array: 'a list' }
  return names[schema.type as string] ?? String(schema.type)
}
