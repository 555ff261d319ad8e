// docs/api.md §7 pull_models and §4 catalogue rule 9: what a worker fetches to materialise an
// existing catalogue entry, decided once for the server (which asks only for what the worker's
// runtime can fetch) and the daemon (whose downloader takes the same files).
//
// - Ollama pulls `runtime_model_id` from its own registry: every entry with an `ollama` profile.
// - Any other runtime downloads from a model hub laid out like Hugging Face
//   (`{hub}/{owner}/{repo}/resolve/{revision}/{path}`): the entry needs `source_type: huggingface`
//   and either
//   - `source_ref: owner/repo` and `artifact_files` (each `path` in the repo, with its sha256), or
//   - no artifact files, a `digest`, and `source_ref: owner/repo/path/in/repo.gguf`: a Hugging Face
//     repo id is exactly two segments, so the rest names the entry's single file.
//   `source_revision` is the branch, tag or commit (default `main`). The ask always carries the
//   repo id alone in `source_ref` and every file in `files`, so a daemon never splits a ref itself.
// An entry none of that covers is never asked for from a worker whose runtime cannot fetch it.

export const HUB_SOURCE_TYPE = 'huggingface'
export const DEFAULT_REVISION = 'main'

export interface DownloadFile {
  /** Path inside the repository. */
  path: string
  /** 64 lowercase hex. */
  sha256: string
  size_bytes: number | null
}

/** What an ask carries about where the entry comes from (docs/api.md §7 pull_models). */
export interface PullSource {
  source_type: string | null
  source_ref: string | null
  source_revision: string | null
  files: DownloadFile[]
}

/** What the rule reads of a catalogue entry. */
export interface DownloadableEntry {
  digest: string | null
  source_type: string | null
  source_ref: string | null
  source_revision: string | null
  artifact_files: readonly DownloadFile[]
}

// A Hugging Face owner or repository name: letters, digits, `-`, `_`, `.`; never `..`.
const REPO_SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]*$/

/**
 * A relative `/`-separated path with no empty, `.` or `..` segment and no backslash or NUL: joined
 * under a directory it can never leave it.
 */
export function isSafeRelativePath(path: string): boolean {
  if (!path || path.length > 1024 || /[\\\0]/.test(path)) return false
  return path.split('/').every((s) => s !== '' && s !== '.' && s !== '..')
}

/** The hub download of `entry`, or null when it has none (see the rules above). */
export function hubSource(entry: DownloadableEntry): PullSource | null {
  if (entry.source_type?.toLowerCase() !== HUB_SOURCE_TYPE || !entry.source_ref) return null
  const segments = entry.source_ref.split('/')
  const [owner, repo] = segments
  if (!owner || !repo || !REPO_SEGMENT.test(owner) || !REPO_SEGMENT.test(repo)) return null
  if (owner.includes('..') || repo.includes('..')) return null
  let files: DownloadFile[]
  if (entry.artifact_files.length > 0) {
    if (segments.length !== 2) return null
    files = entry.artifact_files.map((f) => ({ path: f.path, sha256: f.sha256, size_bytes: f.size_bytes }))
  } else {
    if (segments.length < 3 || entry.digest === null) return null
    files = [{ path: segments.slice(2).join('/'), sha256: entry.digest, size_bytes: null }]
  }
  if (!files.every((f) => isSafeRelativePath(f.path))) return null
  return {
    source_type: HUB_SOURCE_TYPE,
    source_ref: `${owner}/${repo}`,
    source_revision: entry.source_revision || DEFAULT_REVISION,
    files,
  }
}

/** What a worker running `runtime` fetches for `entry`, or null when that runtime cannot fetch it. */
export function pullSource(runtime: string, entry: DownloadableEntry): PullSource | null {
  if (runtime === 'ollama')
    return {
      source_type: entry.source_type,
      source_ref: entry.source_ref,
      source_revision: entry.source_revision,
      files: [...entry.artifact_files],
    }
  return hubSource(entry)
}

// docs/api.md §7 model-progress `failed`, docs/worker.md "Downloads": a download that failed is
// not fetched again by the same worker for a while, so no worker fetches the same bad bytes twice
// in a row (the next poll would otherwise ask it again at once). The back-off is per (entry,
// worker): 10 minutes after the first failure, doubling with each failure in a row to 24 hours; a
// success ends it, and so does a change of what the entry downloads (its `pin`: the catalogue
// fixed the source or a digest). The server keeps it with the ask's history and asks no backed-off
// worker; the daemon keeps its own, so it never fetches while backed off even when asked.

export const DOWNLOAD_BACKOFF_FIRST_SECONDS = 10 * 60
export const DOWNLOAD_BACKOFF_MAX_SECONDS = 24 * 3600

/** The wait after the `failures`-th failure in a row, in seconds. */
export function downloadBackoffSeconds(failures: number): number {
  return Math.min(
    DOWNLOAD_BACKOFF_MAX_SECONDS,
    DOWNLOAD_BACKOFF_FIRST_SECONDS * 2 ** Math.max(0, failures - 1),
  )
}

/** What the entry downloads, in one string: a change of it lifts the back-off. */
export function pullPin(ask: {
  runtime_model_id: string
  digest?: string | null
  source_type?: string | null
  source_ref?: string | null
  source_revision?: string | null
  files?: readonly { path: string; sha256: string; size_bytes?: number | null }[]
}): string {
  const canonical = JSON.stringify([
    ask.runtime_model_id,
    ask.digest ?? null,
    ask.source_type ?? null,
    ask.source_ref ?? null,
    ask.source_revision ?? null,
    (ask.files ?? []).map((f) => [f.path, f.sha256, f.size_bytes ?? null]),
  ])
  return new Bun.CryptoHasher('sha256').update(canonical).digest('hex').slice(0, 32)
}

/** One worker's back-off for one entry. */
export interface DownloadBackoff {
  pin: string
  failures: number
  /** Unix seconds. */
  retry_at: number
}

/**
 * The back-off after a failure of the download `pin`. `grow`: a new failure (one more in a row);
 * false: a worker that refused the ask because of its own back-off, which keeps the count.
 */
export function backOffDownload(
  prev: DownloadBackoff | null | undefined,
  pin: string,
  now: number,
  grow = true,
): DownloadBackoff {
  const same = prev?.pin === pin ? prev.failures : 0
  const failures = grow ? same + 1 : Math.max(1, same)
  return { pin, failures, retry_at: now + downloadBackoffSeconds(failures) }
}

/** Whether the worker must not fetch the download `pin` at `now` (unix seconds). */
export function backedOff(b: DownloadBackoff | null | undefined, pin: string, now: number): boolean {
  return !!b && b.pin === pin && now < b.retry_at
}
