// The in-process event bus between the validator and the batch event streams (docs/api.md §6
// "Events"): the validator publishes, each open stream subscribes to one batch. No stream ever
// polls the database. The bus also keeps the live state of each running validation, so a client
// that connects half-way still receives every stored error (≤ 100) exactly once, and it carries
// the "batch created" signal that wakes the validator's queue.

export interface ValidationErrorEvent {
  code: string
  line: number | null
  field: string | null
  message: string
}

export interface RequestCounts {
  total: number
  completed: number
  failed: number
}

export type BatchEvent =
  | { event: 'progress'; data: { lines_read: number; errors_total: number } }
  | { event: 'error'; data: ValidationErrorEvent }
  | {
      event: 'done'
      data: { batch_id: string; status: string; request_counts: RequestCounts; errors_total: number }
    }

/** What a running validation has produced so far. */
export interface LiveRun {
  lines_read: number
  errors_total: number
  /** The stored errors so far (at most MAX_STORED_ERRORS). */
  errors: ValidationErrorEvent[]
}

type Listener = (e: BatchEvent) => void

export class BatchEventBus {
  private readonly listeners = new Map<string, Set<Listener>>()
  private readonly runs = new Map<string, LiveRun>()
  private readonly createdListeners = new Set<(batchId: string) => void>()
  private readonly taps = new Set<(batchId: string, e: BatchEvent) => void>()

  /** Listens to one batch's events; returns the function that stops listening. */
  subscribe(batchId: string, listener: Listener): () => void {
    let set = this.listeners.get(batchId)
    if (!set) {
      set = new Set()
      this.listeners.set(batchId, set)
    }
    set.add(listener)
    return () => {
      const s = this.listeners.get(batchId)
      if (!s) return
      s.delete(listener)
      if (s.size === 0) this.listeners.delete(batchId)
    }
  }

  publish(batchId: string, e: BatchEvent) {
    for (const tap of this.taps) tap(batchId, e)
    this.deliver(batchId, e)
  }

  /** Hands an event to this process's listeners only (an event from another instance). */
  deliver(batchId: string, e: BatchEvent) {
    const run = this.runs.get(batchId)
    if (run) {
      if (e.event === 'progress') Object.assign(run, e.data)
      else if (e.event === 'error') run.errors.push(e.data)
      else this.runs.delete(batchId)
    }
    const set = this.listeners.get(batchId)
    if (!set) return
    // A listener may unsubscribe while being called (on `done`): iterate over a copy.
    for (const l of [...set]) l(e)
  }

  /** Marks a validation as running, so late subscribers can catch up from `liveRun`. */
  beginRun(batchId: string) {
    this.runs.set(batchId, { lines_read: 0, errors_total: 0, errors: [] })
  }

  /** Forgets a run that ended without `done` (aborted by shutdown). */
  abandonRun(batchId: string) {
    this.runs.delete(batchId)
  }

  liveRun(batchId: string): LiveRun | undefined {
    return this.runs.get(batchId)
  }

  /** Listeners of one batch, or of all batches (tests check that closed streams let go). */
  listenerCount(batchId?: string): number {
    if (batchId) return this.listeners.get(batchId)?.size ?? 0
    let n = 0
    for (const s of this.listeners.values()) n += s.size
    return n
  }

  /** Sees every event published in this process (forwarded to the other instances). */
  onPublish(tap: (batchId: string, e: BatchEvent) => void): () => void {
    this.taps.add(tap)
    return () => this.taps.delete(tap)
  }

  onCreated(listener: (batchId: string) => void): () => void {
    this.createdListeners.add(listener)
    return () => this.createdListeners.delete(listener)
  }

  /** A new batch is waiting for validation. */
  created(batchId: string) {
    for (const l of this.createdListeners) l(batchId)
  }
}

/** This server's batch event bus, made by src/compose.ts (ARCHITECTURE.md rule 2). */
export interface BatchEventsState {
  /** Validator → batch event streams, and the "batch created" signal that wakes the validator. */
  batchEvents: BatchEventBus
}
