// docs/api.md §7 heartbeat: how a worker's reported inventory replaces its worker_models rows, decided
// once here as an ordered list of row operations; each storage engine (src/store/*/fleet.ts
// replaceInventory) applies the list in one transaction with its own statements. The caller runs
// it only when the report's inventory signature changed (modules/workers/service.ts).

/** One on-disk model of a heartbeat's inventory (merged by name above the seam). */
export interface OnDiskModel {
  name: string
  runtime: string | null
  digest: string | null
  size_bytes: number | null
  loaded: boolean
}

/** One operation on one worker's worker_models rows (and its inventory signature). */
export type InventoryOp =
  /** Delete every row not configured: the new inventory states what is on disk. */
  | { op: 'delete_unconfigured' }
  /** Every remaining (configured) row: not on disk, not loaded, no runtime, digest or size. */
  | { op: 'reset_reported' }
  /** Insert or update each model as on disk, with its runtime, digest, size and loaded flag. */
  | { op: 'upsert_on_disk'; models: OnDiskModel[] }
  /** No inventory (an older daemon): only the loaded flags are restated, all cleared first. */
  | { op: 'clear_loaded' }
  /** Insert or flag each loaded model as loaded (a row for a name not yet known). */
  | { op: 'upsert_loaded'; names: string[] }
  /** Delete rows nothing vouches for any more: not configured, not on disk, not loaded. */
  | { op: 'delete_orphans' }
  /** Record what was applied. */
  | { op: 'set_sig'; sig: string }

/**
 * The operations, in order, that bring one worker's rows to a heartbeat's report: with an
 * inventory it replaces the previous one (configured names stay, reset); without one only the
 * loaded flags change. Loaded names are applied once each; empty lists produce no operation.
 */
export function inventoryPlan(
  inventory: readonly OnDiskModel[] | undefined,
  loaded: readonly string[],
  sig: string,
): InventoryOp[] {
  const ops: InventoryOp[] = []
  if (inventory !== undefined) {
    ops.push({ op: 'delete_unconfigured' }, { op: 'reset_reported' })
    if (inventory.length) ops.push({ op: 'upsert_on_disk', models: [...inventory] })
  } else {
    ops.push({ op: 'clear_loaded' })
  }
  const names = [...new Set(loaded)]
  if (names.length) ops.push({ op: 'upsert_loaded', names })
  ops.push({ op: 'delete_orphans' }, { op: 'set_sig', sig })
  return ops
}
