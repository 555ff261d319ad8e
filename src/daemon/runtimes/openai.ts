import { accessSync, constants } from 'node:fs'
import { basename, isAbsolute } from 'node:path'
import type { Engine } from '../../domain/catalogue'
import { log } from '../../lib/logger'
import type { DigestCache } from './digests'
import {
  type InventoryItem,
  type Runtime,
  RuntimeHttpError,
  type RuntimeSnapshot,
  runtimeJson,
  unreadSnapshot,
} from './types'

// Any OpenAI-compatible server (vLLM, llama.cpp server, SGLang, LM Studio, Ollama's /v1). What it
// serves comes from GET /v1/models. Digests (docs/api.md §4: the sha256 of the model file) come from:
// - files the operator names (--model-file NAME=PATH): the first file of a model is its weights (the
//   item named after the model), further files (a multimodal projector, shards) are reported as
//   `<name>+<file name>` so that a catalogue entry with artifact files can match them all;
// - with --engine llama.cpp, the file the server says it loaded: GET /props `model_path` (one model
//   served), or a /v1/models id that is itself a path (llama-server without --alias).
// Files are hashed in the background and cached by path, size and mtime (digests.ts), so neither a
// snapshot nor the heartbeat ever waits on hashing. While a model's file is being hashed the model
// is not advertised at all: advertised by name without its digest, it would match an entry pinned
// to other weights (docs/api.md §7 Poll rule 4); the heartbeat that follows the hash (onInventoryChange)
// brings it in. A file that is not readable here (the engine runs in a container or on another
// host) is said once, and its model is advertised by name only.

interface ModelList {
  data?: { id?: unknown }[]
}

export class OpenAIRuntime implements Runtime {
  readonly kind = 'openai' as const
  private readonly unreadable = new Set<string>()

  constructor(
    readonly baseUrl: string,
    readonly engine: Engine,
    private readonly modelFiles: Record<string, string[]>,
    private readonly digests: DigestCache,
  ) {}

  onInventoryChange(listener: () => void) {
    this.digests.onHashed(listener)
  }

  /** Hashes the files the operator named before registering; discovered files hash in the background. */
  async prepare() {
    for (const paths of Object.values(this.modelFiles)) for (const f of paths) await this.digests.digest(f)
  }

  async slots(): Promise<number | null> {
    try {
      const props = await runtimeJson<{ total_slots?: unknown }>(`${this.baseUrl}/props`)
      const n = props.total_slots
      return typeof n === 'number' && Number.isInteger(n) && n >= 1 ? n : null
    } catch (e) {
      // An engine without /props (vLLM, SGLang…) answers 404: it has no figure to give.
      if (e instanceof RuntimeHttpError) return null
      throw e
    }
  }

  private async modelIds(): Promise<string[]> {
    const list = await runtimeJson<ModelList>(`${this.baseUrl}/v1/models`)
    return (list.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string')
  }

  /** llama.cpp: the loaded file of each served model the operator did not name, if readable here. */
  private async discover(ids: string[]): Promise<Record<string, string[]>> {
    if (this.engine !== 'llama.cpp') return {}
    const unnamed = ids.filter((id) => !this.modelFiles[id])
    if (unnamed.length === 0) return {}
    let loaded: string | null = null
    if (unnamed.length === 1) {
      const props = await runtimeJson<{ model_path?: unknown }>(`${this.baseUrl}/props`).catch(() => null)
      if (typeof props?.model_path === 'string' && props.model_path) loaded = props.model_path
    }
    const out: Record<string, string[]> = {}
    for (const id of unnamed) {
      const path = loaded ?? (isAbsolute(id) ? id : null)
      if (path && this.readable(id, path)) out[id] = [path]
    }
    return out
  }

  private readable(id: string, path: string): boolean {
    try {
      accessSync(path, constants.R_OK)
      this.unreadable.delete(path)
      return true
    } catch (e) {
      if (!this.unreadable.has(path)) {
        this.unreadable.add(path)
        log.warn('the model file the engine loaded is not readable here; matching it by name only', {
          model: id,
          path,
          error: (e as NodeJS.ErrnoException).code ?? (e as Error).message,
        })
      }
      return false
    }
  }

  async snapshot(): Promise<RuntimeSnapshot> {
    let ids: string[]
    try {
      ids = await this.modelIds()
    } catch (e) {
      return unreadSnapshot(e)
    }
    const discovered = await this.discover(ids)
    const inventory: InventoryItem[] = []
    const served: string[] = []
    for (const id of ids) {
      const files = this.modelFiles[id] ?? discovered[id] ?? []
      const items: InventoryItem[] = []
      files.forEach((path, i) => {
        const entry = this.digests.peek(path)
        if (!entry) return
        const local_name = i === 0 ? id : `${id}+${basename(path)}`
        items.push({
          local_name,
          sha256: entry.sha256,
          size_bytes: entry.size,
          loaded: true,
          runtime: this.engine,
        })
      })
      if (files.some((path) => this.digests.hashing(path))) continue
      served.push(id)
      inventory.push(...items)
    }
    // An OpenAI-compatible server lists what it serves, which is what it has loaded.
    return { status: 'online', inventory, models: served, loaded: served }
  }

  serves(model: string, snapshot: RuntimeSnapshot) {
    return snapshot.models.includes(model)
  }
}
