import { statfs } from 'node:fs/promises'
import { dirname } from 'node:path'
import { AppError } from './errors'
import { log } from './logger'

// Free space on the disk that holds the files (docs/api.md §15 MIN_FREE_DISK_BYTES). Measured through a
// probe on Deps, so tests can stand in for a filling disk; the local blob engine's probe asks the
// kernel (statfs) about DATA_DIR/files, and S3 has none (a bucket's space is not ours to measure).

export interface DiskProbe {
  /** Bytes an unprivileged writer may still use on the files' filesystem; null = not measured. */
  freeBytes(): Promise<number | null>
}

/** statfs of `dir`, or of its nearest existing parent before the first file creates it. */
export const statfsProbe = (dir: string): DiskProbe => ({
  async freeBytes() {
    for (let at = dir; ; at = dirname(at)) {
      try {
        const s = await statfs(at)
        return s.bavail * s.bsize
      } catch (e) {
        if ((e as { code?: string }).code !== 'ENOENT' || dirname(at) === at) throw e
      }
    }
  },
})

export const noDiskProbe: DiskProbe = { freeBytes: async () => null }

/** Seconds a client is told to wait before trying again once space may have returned. */
export const INSUFFICIENT_STORAGE_RETRY_SECONDS = 30

/** 507: the server cannot store the upload now; nothing was stored and the client should retry later. */
export const insufficientStorage = () =>
  new AppError(507, 'insufficient_storage', 'The server is low on disk space; try again later', null, {
    'retry-after': String(INSUFFICIENT_STORAGE_RETRY_SECONDS),
  })

/** The disk (or the user's disk quota) filled up during a write. */
export const isNoSpace = (e: unknown) => {
  const code = (e as { code?: unknown } | null)?.code
  return code === 'ENOSPC' || code === 'EDQUOT'
}

/**
 * MIN_FREE_DISK_BYTES: throws 507 when storing `incomingBytes` more (the declared Content-Length,
 * 0 when unknown) would leave less than `minFreeBytes` free. 0 turns the check off.
 */
export async function ensureFreeDisk(probe: DiskProbe, minFreeBytes: number, incomingBytes: number) {
  if (minFreeBytes === 0) return
  let free: number | null
  try {
    free = await probe.freeBytes()
  } catch (e) {
    // A probe that cannot answer refuses nothing: ENOSPC during the write is still a clean 507.
    log.warn('free disk space could not be measured', { error: e instanceof Error ? e : String(e) })
    return
  }
  if (free !== null && free - incomingBytes < minFreeBytes) throw insufficientStorage()
}
