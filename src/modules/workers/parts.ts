import type { Deps } from '../../deps'

/**
 * docs/api.md §16: shards' result parts, once joined or once their batch failed (RequeueOutcome.parts):
 * nothing refers to them any more. A removal that fails leaves an unreferenced blob, never a loss.
 */
export async function removeParts(deps: Deps, keys: readonly (string | null)[] = []) {
  for (const key of keys) if (key) await deps.blobs.remove(key).catch(() => {})
}

/**
 * Removes blobs nothing refers to, failing when one cannot be removed: used where a record lists
 * them until they are gone (a join's lease, docs/api.md §16), so a failure leaves them listed.
 */
export async function removeBlobs(deps: Deps, keys: readonly string[]) {
  for (const key of keys) await deps.blobs.remove(key)
}
