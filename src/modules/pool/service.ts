import type { Deps } from '../../deps'
import type { AnonymousPrincipal, UserPrincipal } from '../../domain/principal'
import { onlineCutoff } from '../workers/liveness'
import { loadCatalogue, servableCatalogIds } from '../workers/matching'

// GET /v1/pool/capacity (docs/api.md §8 Pool rules, docs/api.md §8): an aggregate that is safe to show anyone. It
// never names a hostname, GPU name, worker id or org id. models_servable comes from the same
// predicate poll uses (servableCatalogIds); online is decided at read time.

export interface PoolCapacity {
  object: 'pool.capacity'
  workers_online: number
  workers_idle: number
  workers_busy: number
  gpus_online: number | null
  vram_total_gb: number | null
  models_servable: { id: string; display_name: string; parameter_size: string | null }[]
  as_of: number
}

/** Computes the view for one caller, uncached. */
export async function computeCapacity(
  deps: Deps & PoolState,
  principal: UserPrincipal | AnonymousPrincipal,
): Promise<PoolCapacity> {
  const cutoff = onlineCutoff(deps)
  const counts = await deps.store.fleet.capacityCounts(cutoff)
  const catalogue = await loadCatalogue(deps)
  const servable = await servableCatalogIds(deps, catalogue)
  // docs/api.md §8 Pool rule 4: org-private entries only to that org's members; superadmins see all.
  const superadmin = principal.kind === 'user' && principal.user.platform_role === 'superadmin'
  const orgs =
    principal.kind === 'user' && !superadmin
      ? new Set(await deps.store.fleet.orgIdsOf(principal.user.id))
      : new Set<string>()
  const visible = (orgId: string | null) => orgId === null || superadmin || orgs.has(orgId)
  // docs/api.md §8 Pool rule 3: hardware figures for signed-in callers only, and only from the threshold on.
  const hardware = principal.kind === 'user' && counts.online >= deps.config.MIN_WORKERS_FOR_HARDWARE
  return {
    object: 'pool.capacity',
    workers_online: counts.online,
    workers_idle: counts.idle,
    workers_busy: counts.online - counts.idle,
    gpus_online: hardware ? await deps.store.fleet.gpusOnline(cutoff) : null,
    vram_total_gb: hardware ? Math.round(counts.vram * 100) / 100 : null,
    models_servable: catalogue.entries
      .filter((e) => servable.has(e.id) && visible(e.org_id))
      .map((e) => ({ id: e.id, display_name: e.display_name, parameter_size: e.parameter_size }))
      .sort((a, b) => a.id.localeCompare(b.id)),
    as_of: deps.clock.now(),
  }
}

/** One caller class's answer, kept serialized: a cached answer costs little more than writing it. */
export interface KeptCapacity {
  as_of: number
  /** The serialized answer, or its computation under way (every caller that misses meanwhile shares it). */
  body: string | Promise<string>
}

/** docs/api.md §8 Pool rule 6: pool capacity answers per caller class, each kept POOL_CACHE_SECONDS, per server. */
export interface PoolState {
  poolCache: Map<string, KeptCapacity>
}

// docs/api.md §8 Pool rule 6: responses are cached POOL_CACHE_SECONDS, per caller class (docs/api.md §8:
// anonymous, and each user, whose org-visible entries differ), in deps.poolCache.
const MAX_CACHED_CLASSES = 10_000

/** GET /v1/pool/capacity for `principal`, serialized. */
export function poolCapacity(
  deps: Deps & PoolState,
  principal: UserPrincipal | AnonymousPrincipal,
): string | Promise<string> {
  const cache = deps.poolCache
  // A user's id (user_…) never reads 'anonymous'.
  const key = principal.kind === 'user' ? principal.user.id : 'anonymous'
  const now = deps.clock.now()
  const hit = cache.get(key)
  // One computation per caller class at a time: when the answer expires under load, the callers
  // that miss together wait for one read of the fleet instead of each making their own.
  if (hit && (typeof hit.body !== 'string' || now - hit.as_of < deps.config.POOL_CACHE_SECONDS))
    return hit.body
  if (cache.size >= MAX_CACHED_CLASSES) {
    for (const [k, v] of cache)
      if (typeof v.body === 'string' && now - v.as_of >= deps.config.POOL_CACHE_SECONDS) cache.delete(k)
    if (cache.size >= MAX_CACHED_CLASSES) cache.clear()
  }
  const computing = computeCapacity(deps, principal).then((fresh) => {
    const body = JSON.stringify(fresh)
    if (cache.get(key) === entry) cache.set(key, { as_of: fresh.as_of, body })
    return body
  })
  const entry: KeptCapacity = { as_of: now, body: computing }
  cache.set(key, entry)
  computing.catch(() => {
    if (cache.get(key) === entry) cache.delete(key)
  })
  return computing
}
