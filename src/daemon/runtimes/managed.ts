import { basename } from 'node:path'
import type { DownloadFile } from '../../domain/downloads'
import type { Timers } from '../backoff'
import { DownloadError, type HubAccess, type ModelLayout, pullFromHub, reclaimPartials } from '../download'
import type { ManagedEngine } from '../engines/types'
import { ModelManager } from '../models/manager'
import type { Room } from '../models/plan'
import type { StateDir } from '../state'
import type { DigestCache } from './digests'
import type { InventoryItem, PullProgress, PullTask, Runtime, RuntimeSnapshot } from './types'

// A runtime whose models the daemon loads and unloads itself (docs/worker.md "Managed engines"):
// what the agent sees of a managed engine (engines/types.ts) and its model manager.
//
// - The inventory (docs/api.md §7) is every model on disk with the sha256 of each of its files:
//   the weights file is the item named after the model, further files (a projector, more shards)
//   are `<name>+<file name>` as runtimes/openai.ts reports them, so entries listing artifact files
//   match. Files are hashed in the background (digests.ts) and a model is advertised only once all
//   its files are hashed: advertised by name alone it could match an entry pinned to other weights
//   (docs/api.md §7 Poll rule 4). A model whose files are not readable here (an attached engine on
//   another host) is advertised by name only.
// - `loaded` is the engine's own word; an item's `loaded` flag follows it.
// - Jobs get their model through `manager.acquire()` (job.ts).
// - pull (docs/api.md §7 pull_models): an engine with a models directory of this daemon's
//   (layoutFor) downloads a catalogue entry from the hub (download.ts) into it; the files' verified
//   digests go to the digest cache (nothing is hashed twice), the engine rescans, and the next
//   heartbeat's inventory carries the model. A model already at the destination is hashed through
//   the same cache (joining a background hash of it under way). Partial downloads nobody finished
//   are reclaimed at the start and after each download (download.ts reclaimPartials).

export class ManagedRuntime implements Runtime {
  readonly kind: 'llama.cpp' | 'launched'
  readonly manager: ModelManager
  private readonly listeners = new Set<() => void>()

  /** Absent when the engine has no models directory of ours to download into. */
  readonly pull?: Runtime['pull']
  private readonly modelsDir: string | null

  constructor(
    readonly managed: ManagedEngine,
    private readonly digests: DigestCache,
    o: {
      state: StateDir
      room: (fresh: boolean) => Promise<Room>
      timers?: Timers
      kind?: 'launched'
      /**
       * Where downloads come from, the largest allowed and where they land (--hub-url, --hub-token,
       * --max-download-gb, --models-dir).
       */
      downloads?: { hub: HubAccess; maxDownloadGb: number; modelsDir?: string }
    },
  ) {
    this.kind = o.kind ?? 'llama.cpp'
    const { layoutFor } = managed
    const downloads = o.downloads
    this.modelsDir = downloads?.modelsDir ?? null
    if (downloads && layoutFor)
      this.pull = (task, onProgress, signal) => this.download(task, downloads, layoutFor, onProgress, signal)
    this.manager = new ModelManager({
      engine: managed,
      state: o.state,
      room: o.room,
      timers: o.timers,
      onChange: () => {
        for (const l of this.listeners) l()
      },
    })
  }

  get engine() {
    return this.managed.engine
  }

  get baseUrl() {
    return this.managed.baseUrl
  }

  onInventoryChange(listener: () => void) {
    this.digests.onHashed(listener)
    this.listeners.add(listener)
  }

  /** Starts the engine (or adopts the one a killed run left); files are hashed in the background. */
  async prepare() {
    this.reclaim()
    await this.managed.start()
  }

  private reclaim() {
    if (this.pull && this.modelsDir) reclaimPartials(this.modelsDir)
  }

  async close() {
    await this.managed.stop()
  }

  async snapshot(): Promise<RuntimeSnapshot> {
    const view = await this.manager.refresh()
    if (view.status !== 'online')
      return {
        status: view.status,
        inventory: [],
        models: [],
        loaded: [],
        ...(view.error ? { error: view.error } : {}),
      }
    const inventory: InventoryItem[] = []
    const models: string[] = []
    const loaded: string[] = []
    // A further copy of a model (docs/worker.md "GPUs") is not another model: its model is listed,
    // loaded while any copy of it is.
    const copyLoaded = new Set(
      view.models.filter((m) => m.copy_of && m.state === 'loaded').map((m) => m.copy_of!),
    )
    for (const m of view.models) {
      if (m.copy_of) continue
      const isLoaded = m.state === 'loaded' || copyLoaded.has(m.name)
      const items: InventoryItem[] = []
      let hashed = true
      m.files.forEach((path, i) => {
        const entry = this.digests.peek(path)
        if (!entry) {
          hashed = false
          return
        }
        items.push({
          local_name: i === 0 ? m.name : `${m.name}+${basename(path)}`,
          sha256: entry.sha256,
          size_bytes: entry.size,
          loaded: isLoaded,
          runtime: this.managed.engine,
        })
      })
      if (!hashed) continue
      models.push(m.name)
      inventory.push(...items)
      if (isLoaded) loaded.push(m.name)
    }
    return { status: 'online', inventory, models, loaded }
  }

  private async download(
    task: PullTask,
    downloads: { hub: HubAccess; maxDownloadGb: number },
    layoutFor: (name: string, files: readonly DownloadFile[]) => ModelLayout,
    onProgress: (p: PullProgress) => void,
    signal?: AbortSignal,
  ) {
    let done: Awaited<ReturnType<typeof pullFromHub>>
    try {
      done = await pullFromHub(task, {
        ...downloads,
        layout: layoutFor,
        onProgress,
        signal,
        hash: async (path) => (await this.digests.digest(path))?.sha256 ?? null,
      })
    } finally {
      this.reclaim()
    }
    for (const f of done.files) this.digests.remember(f.path, f.sha256)
    // The engine rescans its directory (the router: GET /models?reload=1) and lists the model: a
    // read begun before the model was placed (a heartbeat's) would not list it.
    const view = await this.manager.refresh({ fresh: true })
    if (!view.models.some((m) => m.name === task.runtime_model_id))
      throw new DownloadError(
        `${task.runtime_model_id} was downloaded to ${done.dest} but the engine does not list it`,
      )
    for (const l of this.listeners) l()
  }

  serves(model: string, snapshot: RuntimeSnapshot) {
    return snapshot.models.includes(model)
  }

  /**
   * The slots of a loaded model (llama.cpp /props?model=, a launched engine's max_num_seqs), else
   * the profile's `parallel`; null when neither says.
   */
  async slots(model?: string, params: Record<string, unknown> = {}): Promise<number | null> {
    const asked = model && this.managed.slots ? await this.managed.slots(model).catch(() => null) : null
    if (asked) return asked
    const parallel = params.parallel ?? params.max_num_seqs ?? params.max_running_requests
    return typeof parallel === 'number' && Number.isInteger(parallel) && parallel >= 1 ? parallel : null
  }
}
