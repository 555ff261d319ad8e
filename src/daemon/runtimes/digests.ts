import { statSync } from 'node:fs'
import { log } from '../../lib/logger'
import type { StateDir } from '../state'

// sha256 of model files (docs/api.md §7: an inventory item's sha256 is the hash of the model file). Hashing
// 40 GB of weights takes minutes, so each result is cached in the state directory under the file's
// path and kept while its size and mtime are unchanged.

interface Entry {
  size: number
  mtime_ms: number
  sha256: string
}

const CACHE_FILE = 'digests.json'

export class DigestCache {
  private entries: Record<string, Entry>
  private readonly running = new Map<string, Promise<Entry | null>>()
  private readonly hashed = new Set<() => void>()

  constructor(private readonly state: StateDir) {
    this.entries = state.readJson<Record<string, Entry>>(CACHE_FILE) ?? {}
  }

  /** Called after each background hash: an inventory that lacked the digest can now carry it. */
  onHashed(listener: () => void) {
    this.hashed.add(listener)
  }

  /** The cached digest when the file is unchanged, else null (and hashing starts in the background). */
  peek(path: string): Entry | null {
    const st = stat(path)
    if (!st) return null
    const e = this.entries[path]
    if (e && e.size === st.size && e.mtime_ms === st.mtimeMs) return e
    void this.digest(path)
    return null
  }

  /**
   * A digest already known (a download hashed the file as it arrived and checked it against the
   * catalogue): cached for the file as it is now, so that it is not read again.
   */
  remember(path: string, sha256: string) {
    const st = stat(path)
    if (!st) return
    this.entries = { ...this.entries, [path]: { size: st.size, mtime_ms: st.mtimeMs, sha256 } }
    this.state.writeJson(CACHE_FILE, this.entries)
  }

  /** Whether the file is being hashed right now. */
  hashing(path: string): boolean {
    return this.running.has(path)
  }

  /** The digest, hashing the file if the cache does not hold it for this size and mtime. */
  digest(path: string): Promise<Entry | null> {
    const st = stat(path)
    if (!st) return Promise.resolve(null)
    const e = this.entries[path]
    if (e && e.size === st.size && e.mtime_ms === st.mtimeMs) return Promise.resolve(e)
    const running = this.running.get(path)
    if (running) return running
    const job = hashFile(path)
      .then((sha256) => {
        const entry = { size: st.size, mtime_ms: st.mtimeMs, sha256 }
        this.entries = { ...this.entries, [path]: entry }
        this.state.writeJson(CACHE_FILE, this.entries)
        for (const l of this.hashed) l()
        return entry
      })
      .catch((err) => {
        log.warn('could not hash model file', { path, error: err })
        return null
      })
      .finally(() => this.running.delete(path))
    this.running.set(path, job)
    return job
  }
}

const stat = (path: string) => {
  try {
    const s = statSync(path)
    return s.isFile() ? s : null
  } catch {
    return null
  }
}

/** Streams the file through SHA-256; memory stays at one chunk whatever the file size. */
export async function hashFile(path: string): Promise<string> {
  const started = performance.now()
  const hasher = new Bun.CryptoHasher('sha256')
  for await (const chunk of Bun.file(path).stream()) hasher.update(chunk)
  const sha256 = hasher.digest('hex')
  log.info('hashed model file', { path, ms: Math.round(performance.now() - started) })
  return sha256
}
