import { basename } from 'node:path'
import type { DigestCache } from './digests'
import { type InventoryItem, type Runtime, type RuntimeSnapshot, runtimeJson, statusOf } from './types'

// Any OpenAI-compatible server (vLLM, llama.cpp server, SGLang, LM Studio, Ollama's /v1). What it
// serves comes from GET /v1/models. Those servers do not say which file they loaded, so digests come
// only from files the operator names (--model-file NAME=PATH): the first file of a model is its
// weights (the item named after the model), further files (a multimodal projector, shards) are
// reported as `<name>+<file name>` so that a catalogue entry with artifact files can match them all.
// A served model without a named file is advertised by name only (SPEC §4 Poll rule 4: name match).

interface ModelList {
  data?: { id?: unknown }[]
}

export class OpenAIRuntime implements Runtime {
  readonly kind = 'openai' as const

  constructor(
    readonly baseUrl: string,
    readonly engine: string,
    private readonly modelFiles: Record<string, string[]>,
    private readonly digests: DigestCache,
  ) {}

  async prepare() {
    for (const files of Object.values(this.modelFiles)) for (const f of files) await this.digests.digest(f)
  }

  async snapshot(): Promise<RuntimeSnapshot> {
    let ids: string[]
    try {
      const list = await runtimeJson<ModelList>(`${this.baseUrl}/v1/models`)
      ids = (list.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string')
    } catch (e) {
      return { status: statusOf(e), inventory: [], models: [], loaded: [], error: (e as Error).message }
    }
    const inventory: InventoryItem[] = []
    for (const id of ids) {
      const files = this.modelFiles[id] ?? []
      files.forEach((path, i) => {
        const entry = this.digests.peek(path)
        if (!entry) return
        const local_name = i === 0 ? id : `${id}+${basename(path)}`
        inventory.push({
          local_name,
          sha256: entry.sha256,
          size_bytes: entry.size,
          loaded: true,
          runtime: this.engine,
        })
      })
    }
    // An OpenAI-compatible server lists what it serves, which is what it has loaded.
    return { status: 'online', inventory, models: ids, loaded: ids }
  }

  serves(model: string, snapshot: RuntimeSnapshot) {
    return snapshot.models.includes(model)
  }
}
