// A catalogue entry as stored (docs/api.md §4 "Catalogue entry"): the types the manifest check
// produces (src/modules/catalogue/manifest.ts), the seed upsert decides on
// (src/domain/catalogue-upsert.ts) and each storage engine writes.

/** Engine names a daemon reports (docs/api.md §7); a serving profile names one of them. */
export const ENGINES = ['ollama', 'vllm', 'llama.cpp', 'sglang', 'tgi', 'lmstudio', 'openai'] as const
export type Engine = (typeof ENGINES)[number]

export const TASK_TYPES = ['chat', 'text-generation', 'embedding', 'vision'] as const
export const STATUSES = ['active', 'requested', 'deprecated', 'unverified'] as const
export type TaskType = (typeof TASK_TYPES)[number]
export type CatalogueStatus = (typeof STATUSES)[number]

export interface ServingProfile {
  runtime: Engine
  runtime_model_id: string
  params: Record<string, unknown>
  /** true when derived from the entry's runtime/runtime_model_id (docs/api.md §4). */
  derived: boolean
}

export interface ArtifactFile {
  path: string
  sha256: string
  size_bytes: number | null
}

/** A valid entry with every default applied and every digest normalized: what gets stored. */
export interface CatalogueEntry {
  id: string
  display_name: string
  runtime: Engine
  runtime_model_id: string
  digest: string | null
  quantization: string | null
  parameter_size: string | null
  context_length: number | null
  vram_gb: number | null
  size_gb: number | null
  task_type: TaskType | null
  capabilities: Record<string, boolean>
  lineage: string | null
  source_type: string | null
  source_ref: string | null
  source_revision: string | null
  homepage_url: string | null
  org_id: string | null
  status: CatalogueStatus
  enabled: boolean
  renamed_from: string | null
  serving_profiles: ServingProfile[]
  artifact_files: ArtifactFile[]
}
