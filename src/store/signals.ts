// Signals between the instances sharing a database (docs/api.md §12; ARCHITECTURE.md rule 15, after pg-boss's
// notifier): a hint that something happened to a batch, never the state itself. A listener wakes
// and reads the database, so a lost signal delays, never loses. On SQLite there is one process and
// the in-process bus (src/lib/batch-events.ts) carries everything: its signals go nowhere.

export type BatchSignal =
  /** A validation made progress (the counts ride along: they are not stored until the end). */
  | { kind: 'progress'; batch_id: string; lines_read: number; errors_total: number }
  /** A validation finished: its outcome and stored errors are in the database. */
  | { kind: 'validated'; batch_id: string }
  /**
   * A batch became claimable (validated or requeued): long polls may look again — with `needs`,
   * only those that can meet them (docs/api.md §7 Poll rule 7).
   */
  | { kind: 'claimable'; batch_id: string; model: string; needs?: string[] }
  /**
   * The catalogue, or which entries the fleet can serve, changed (catalogue/view.ts): the other
   * instances drop their view, and on `catalogue` read the catalogue again (readCatalogue).
   */
  | { kind: 'models_changed'; scope: 'catalogue' | 'fleet' }
  /**
   * A credential changed (http/credential-cache.ts): the other instances forget the keys
   * and users these ids name (key, user or org ids).
   */
  | { kind: 'credentials_changed'; ids: string[] }

export interface SignalsStore {
  /** Sends a signal to every other instance. */
  publish(signal: BatchSignal): Promise<void>
  /** Receives the other instances' signals until the returned stop() is called. */
  subscribe(onSignal: (signal: BatchSignal) => void): Promise<() => Promise<void>>
}
