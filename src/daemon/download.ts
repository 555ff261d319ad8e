import {
  closeSync,
  type Dirent,
  existsSync,
  ftruncateSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statfsSync,
  statSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
  writeSync,
} from 'node:fs'
import { hostname } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { DEFAULT_REVISION, type DownloadFile, HUB_SOURCE_TYPE, isSafeRelativePath } from '../domain/downloads'
import { digestOrNull } from '../lib/digest'
import { log as rootLog } from '../lib/logger'
import type { PullModel } from '../protocol/worker'
import { type Backoff, every, realTimers, retryAfterMs, retryDelay, type Timers } from './backoff'
import { hashFile } from './runtimes/digests'

// The daemon's model downloader (docs/worker.md "Downloads"; docs/api.md §7 pull_models): fetches
// the files of a catalogue entry from a model hub laid out like Hugging Face,
// `{hub}/{owner}/{repo}/resolve/{revision}/{path}`, into a layout the runtime chose, and verifies
// every file's sha256 against the catalogue's before the model appears. Engine-agnostic: a runtime
// that serves from a models directory (llama.cpp's router, a per-model engine) names where files
// land (modelsDirLayout) and rescans afterwards.
//
// - Checked first: the total size against --max-download-gb and the free space of the target's
//   filesystem (statfs); either refuses with a reason and fetches nothing.
// - Each file is written under a temporary name (`….partial`, never `.gguf`, so no engine scanning
//   the directory takes it for a model) and hashed while it streams. A dropped connection continues
//   with `Range: bytes=N-` and `If-Range: <ETag>`; a hub whose file changed answers the whole new
//   file (200) and the file starts over. A partial left by an earlier run is resumed the same way,
//   its kept prefix hashed first (its ETag is kept beside it).
// - Only once every file matched does the model move into place (one rename of the file, or of
//   the directory holding all of them): an engine never sees half a model.
// - A digest mismatch, a hub answering 404 (or 5xx, or cutting the connection, `retries` times in a
//   row without a new byte), or a file larger than the catalogue says fails the download and
//   leaves nothing behind. A stop (the daemon shutting down) keeps the partials for the next time.
// - The daemon never deletes or overwrites a path it did not make: a destination already there (a
//   model someone copied in, still being hashed for the inventory) is hashed, and is the download
//   when every file matches the catalogue; else the download fails saying so and leaves it as it
//   is. A destination that appears while the files arrive is judged the same way at the end: the
//   model moves into place only where nothing is (link(2) for a file, which never replaces one).
// - The partial files are locked while written (`.<name>.partial.lock`, created with O_EXCL and
//   holding the writer's pid, host and start, its mtime refreshed every minute), so two daemons
//   sharing a models directory over NFS never write one file. O_EXCL rather than flock(2): Linux
//   emulates flock over NFS with byte-range locks that a `nolock` or `local_lock` mount keeps on
//   one host without a word, and O_EXCL creation is atomic on NFSv3 and later. A lock is a dead
//   holder's when its pid is gone on this host, or it has not been refreshed for LOCK_STALE_MS.
// - Partial files nobody has written for PARTIAL_RECLAIM_MS (an ask that never came back), and no
//   live lock holds, are removed (reclaimPartials, at the daemon's start and after each download).
// - Every request says `Accept-Encoding: identity` (as huggingface_hub does): a hub or proxy that
//   compressed a file would make its Content-Length the compressed size, and the size check fail.
// - The hub token is sent as `Authorization: Bearer …` and appears in no log line or error.

const log = rootLog.child({ component: 'download' })

export const DEFAULT_HUB_URL = 'https://huggingface.co'

export interface HubAccess {
  /** Base URL, no trailing slash. */
  url: string
  token?: string
}

/** Why a download failed for good: what model-progress `failed` carries as `error`. */
export class DownloadError extends Error {}

/** One file to fetch: its path in the repository, its pin, and where it is written under the target. */
export interface LayoutFile extends DownloadFile {
  /** Relative to the target directory; '' when the target is the file itself. */
  rel: string
}

/** Where a model lands: one file, or a directory of files, appearing whole when verified. */
export interface ModelLayout {
  kind: 'file' | 'dir'
  /** The file or directory the engine finds once the download is done. */
  dest: string
  files: LayoutFile[]
}

/**
 * The models-directory layout (docs/worker.md "Downloads"): a single GGUF file lands as
 * `<modelsDir>/<runtime_model_id>.gguf` (llama.cpp's router names a file by its stem); anything
 * else in `<modelsDir>/<runtime_model_id>/`, each file at its repository path, or, with `flat`, by
 * its file name (llama.cpp's router reads the GGUFs of a model's directory one level deep and names
 * the model after the directory).
 */
export function modelsDirLayout(
  modelsDir: string,
  runtimeModelId: string,
  files: readonly DownloadFile[],
  o: { flat?: boolean; directory?: boolean } = {},
): ModelLayout {
  if (files.length === 0) throw new DownloadError('the catalogue names no file to download')
  if (!isSafeRelativePath(runtimeModelId))
    throw new DownloadError(`the model name "${runtimeModelId}" cannot be a path under the models directory`)
  for (const f of files)
    if (!isSafeRelativePath(f.path))
      throw new DownloadError(`the file path "${f.path}" is not a safe relative path`)
  if (!o.directory && files.length === 1 && files[0]!.path.toLowerCase().endsWith('.gguf'))
    return {
      kind: 'file',
      dest: join(modelsDir, `${runtimeModelId}.gguf`),
      files: [{ ...files[0]!, rel: '' }],
    }
  const rels = files.map((f) => (o.flat ? basename(f.path) : f.path))
  const seen = new Set<string>()
  for (const r of rels) {
    if (seen.has(r)) throw new DownloadError(`two files would land as "${r}"`)
    seen.add(r)
  }
  return {
    kind: 'dir',
    dest: join(modelsDir, runtimeModelId),
    files: files.map((f, i) => ({ ...f, rel: rels[i]! })),
  }
}

export interface DownloadProgress {
  status: 'downloading' | 'verifying'
  completed_bytes: number
  total_bytes: number
}

export interface DownloadRequest {
  hub: HubAccess
  /** `owner/repo`. */
  repo: string
  revision: string
  layout: ModelLayout
  /** The largest download allowed, in bytes (--max-download-gb). */
  maxBytes: number
  /** The entry's size_gb in bytes: the size of a file neither the catalogue nor the hub gives. */
  sizeHint?: number | null
  /** Called as bytes arrive (the caller throttles what it reports), then once `verifying`. */
  onProgress?: (p: DownloadProgress) => void
  /** Stops the download, keeping its partial files for the next time. */
  signal?: AbortSignal
  timers?: Timers
  backoff?: Backoff
  /** Attempts of one file in a row that bring no new byte before the download fails (default 5). */
  retries?: number
  /** A response that sends nothing for this long is cut and retried (default 60 s). */
  stallMs?: number
  /** Free bytes on the filesystem holding `path` (default: statfs). */
  freeBytes?: (path: string) => number
  /** The sha256 of a file already at the destination (default: read it through). */
  hash?: (path: string) => Promise<string | null>
}

/** docs/worker.md "Downloads": a lock not refreshed for this long was left by a dead holder. */
export const LOCK_STALE_MS = 10 * 60_000
const LOCK_REFRESH_MS = 60_000
/** docs/worker.md "Downloads": partial files nobody has written for this long are removed. */
export const PARTIAL_RECLAIM_MS = 24 * 3600_000
/** docs/worker.md "Downloads": a file interrupted `retries` × this many times in all fails the download. */
export const INTERRUPTIONS_PER_RETRY = 20
/** How often a model already at the destination says it is still being hashed (the default --progress-interval). */
const HASH_REPORT_MS = 5000

const GB = 1e9
const gb = (bytes: number) => `${(bytes / GB).toFixed(2)} GB`

/** Free bytes for an unprivileged writer on the filesystem of `path`. */
export function statfsFreeBytes(path: string): number {
  const s = statfsSync(path)
  return Number(s.bavail) * Number(s.bsize)
}

interface FileState extends LayoutFile {
  url: string
  partial: string
  /** Bytes expected: the catalogue's, else the hub's Content-Length; null while unknown. */
  size: number | null
  kept: number
}

/** What a finished download placed: every file where it now is, with its verified sha256. */
export interface Downloaded {
  bytes: number
  files: { path: string; sha256: string }[]
  /** The model was already at the destination, every file the catalogue's: nothing was fetched. */
  found?: boolean
}

/** Fetches, verifies and moves into place every file of `req.layout`. Throws DownloadError on failure. */
export async function downloadModel(req: DownloadRequest): Promise<Downloaded> {
  const { layout } = req
  const parent = dirname(layout.dest)
  mkdirSync(parent, { recursive: true })
  const staging = join(parent, `.${basename(layout.dest)}.partial`)
  for (const f of layout.files)
    if (!digestOrNull(f.sha256))
      throw new DownloadError(`the catalogue's sha256 of "${f.path}" is not a digest`)
  const dlog = log.child({ repo: req.repo, revision: req.revision, dest: layout.dest })

  const there = await alreadyThere(req, dlog)
  if (there) return there
  const lock = lockPartial(staging, req.timers ?? realTimers, dlog)
  try {
    return await fetchAndPlace(req, staging, dlog)
  } finally {
    lock.release()
  }
}

async function fetchAndPlace(req: DownloadRequest, staging: string, dlog: typeof log): Promise<Downloaded> {
  const { layout } = req
  const parent = dirname(layout.dest)
  const files: FileState[] = layout.files.map((f) => {
    const partial = layout.kind === 'file' ? staging : join(staging, `${f.rel}.partial`)
    return {
      ...f,
      sha256: digestOrNull(f.sha256)!,
      url: fileUrl(req.hub.url, req.repo, req.revision, f.path),
      partial,
      size: f.size_bytes,
      kept: sizeOf(partial),
    }
  })
  const signal = req.signal ?? new AbortController().signal
  // docs/worker.md "Downloads": the bytes as stored, never a compressed encoding of them.
  const headers: Record<string, string> = {
    'accept-encoding': 'identity',
    ...(req.hub.token ? { authorization: `Bearer ${req.hub.token}` } : {}),
  }

  // What is needed before anything is fetched: the sizes the catalogue does not give, from the hub.
  for (const f of files) if (f.size === null) f.size = await headSize(f.url, headers, signal)
  const unknown = files.filter((f) => f.size === null).length
  const known = files.reduce((sum, f) => sum + (f.size ?? 0), 0)
  const total = unknown > 0 ? Math.max(known, req.sizeHint ?? 0) : known
  if (total > req.maxBytes)
    throw new DownloadError(`the download is ${gb(total)}, over --max-download-gb (${gb(req.maxBytes)})`)
  for (const f of files) if (f.size !== null && f.kept > f.size) f.kept = truncate(f.partial)
  const kept = files.reduce((sum, f) => sum + f.kept, 0)
  const free = (req.freeBytes ?? statfsFreeBytes)(parent)
  if (total - kept > free)
    throw new DownloadError(
      `not enough free disk in ${parent}: the download needs ${gb(total - kept)} more, ${gb(free)} free`,
    )

  const progress = { completed: kept, total }
  const report = (status: DownloadProgress['status']) =>
    req.onProgress?.({ status, completed_bytes: progress.completed, total_bytes: progress.total })
  dlog.info('downloading model', { files: files.length, bytes: total, resuming_bytes: kept })
  report('downloading')
  try {
    if (layout.kind === 'dir') mkdirSync(staging, { recursive: true })
    for (const f of files) {
      mkdirSync(dirname(f.partial), { recursive: true })
      await fetchFile(f, req, headers, signal, progress, () => report('downloading'))
    }
  } catch (e) {
    if (!signal.aborted) discard(layout, staging, files)
    throw e
  }
  report('verifying')
  if (!place(layout, staging, files)) {
    // Someone put a model there while the files arrived: theirs stays, judged as at the start.
    dlog.info('the destination appeared during the download; it is kept', { dest: layout.dest })
    discard(layout, staging, files)
    const there = await alreadyThere(req, dlog)
    if (there) return there
    throw new DownloadError(`${layout.dest} appeared during the download; it is left as it is`)
  }
  dlog.info('model downloaded and verified', { bytes: progress.completed })
  return {
    bytes: progress.completed,
    files: files.map((f) => ({
      path: layout.kind === 'file' ? layout.dest : join(layout.dest, f.rel),
      sha256: f.sha256,
    })),
  }
}

/** Something at `path`, even a dangling symbolic link. */
function exists(path: string): boolean {
  try {
    lstatSync(path)
    return true
  } catch {
    return false
  }
}

/**
 * docs/worker.md "Downloads": a destination already there is hashed, never replaced. Null when
 * nothing is there; the download when every file is there with the catalogue's sha256; else a
 * DownloadError saying what differs.
 */
async function alreadyThere(req: DownloadRequest, dlog: typeof log): Promise<Downloaded | null> {
  const { layout } = req
  if (!exists(layout.dest)) return null
  const leftAlone = '; it is left as it is'
  const want = layout.kind === 'file' ? 'file' : 'directory'
  const isKind = (p: string, dir: boolean) => {
    try {
      return dir ? statSync(p).isDirectory() : statSync(p).isFile()
    } catch {
      return false
    }
  }
  if (!isKind(layout.dest, layout.kind === 'dir'))
    throw new DownloadError(`${layout.dest} is already there and is not a ${want}${leftAlone}`)
  const paths = layout.files.map((f) => (layout.kind === 'file' ? layout.dest : join(layout.dest, f.rel)))
  const missing = paths.find((p) => !isKind(p, false))
  if (missing)
    throw new DownloadError(`${layout.dest} is already there without ${basename(missing)}${leftAlone}`)
  const total = paths.reduce((sum, p) => sum + statSync(p).size, 0)
  dlog.info('the destination is already there; hashing it', { files: paths.length, bytes: total })
  const verifying = () => req.onProgress?.({ status: 'verifying', completed_bytes: 0, total_bytes: total })
  verifying()
  // Hashing 100 GB takes minutes: the report goes on meanwhile, so the ask never lapses for silence.
  const alive = every(req.timers ?? realTimers, HASH_REPORT_MS, verifying)
  const hash = req.hash ?? hashFile
  try {
    for (const [i, f] of layout.files.entries()) {
      const got = await hash(paths[i]!)
      const pin = digestOrNull(f.sha256)
      if (got !== pin)
        throw new DownloadError(
          `${paths[i]} is already there and is not the catalogue's: its sha256 is ${got ?? 'unreadable'}, the catalogue's ${pin}${leftAlone}`,
        )
    }
  } finally {
    alive.stop()
  }
  req.onProgress?.({ status: 'verifying', completed_bytes: total, total_bytes: total })
  dlog.info("the model already there is the catalogue's", { files: paths.length })
  return {
    bytes: 0,
    files: layout.files.map((f, i) => ({ path: paths[i]!, sha256: digestOrNull(f.sha256)! })),
    found: true,
  }
}

// ── the lock of a partial download (see the top) ────────────────────────────────────────────────

interface LockHolder {
  text: string
  pid: number | null
  host: string | null
  started_at: string | null
  mtimeMs: number
}

function readLock(path: string): LockHolder | null {
  try {
    const text = readFileSync(path, 'utf8')
    const mtimeMs = statSync(path).mtimeMs
    let body: { pid?: unknown; host?: unknown; started_at?: unknown } = {}
    try {
      body = JSON.parse(text)
    } catch {}
    return {
      text,
      pid: typeof body.pid === 'number' ? body.pid : null,
      host: typeof body.host === 'string' ? body.host : null,
      started_at: typeof body.started_at === 'string' ? body.started_at : null,
      mtimeMs,
    }
  } catch {
    return null
  }
}

const processAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** Why the lock is a dead holder's, or null while its holder may be alive. */
function staleness(held: LockHolder, nowMs = Date.now()): string | null {
  if (held.host === hostname() && held.pid !== null && !processAlive(held.pid))
    return `its process ${held.pid} is gone`
  const idle = nowMs - held.mtimeMs
  return idle > LOCK_STALE_MS ? `not refreshed for ${Math.round(idle / 60_000)} min` : null
}

/** Takes the lock of `staging`'s partial files, or throws DownloadError naming its live holder. */
function lockPartial(staging: string, timers: Timers, dlog: typeof log): { release(): void } {
  const path = `${staging}.lock`
  const mine = JSON.stringify({ pid: process.pid, host: hostname(), started_at: new Date().toISOString() })
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, 'wx')
      try {
        writeSync(fd, mine)
      } finally {
        closeSync(fd)
      }
      const refresh = every(timers, LOCK_REFRESH_MS, () => {
        try {
          const now = new Date()
          utimesSync(path, now, now)
        } catch {}
      })
      return {
        release() {
          refresh.stop()
          if (readLock(path)?.text === mine) rmSync(path, { force: true })
        },
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e
    }
    const held = readLock(path)
    if (!held) continue // released meanwhile
    const stale = staleness(held)
    if (!stale) {
      const who =
        held.pid === null ? 'another daemon' : `pid ${held.pid} on ${held.host ?? 'an unknown host'}`
      throw new DownloadError(
        `another daemon is downloading into ${staging} (${who}, since ${held.started_at ?? 'an unknown time'}); it is not fetched twice`,
      )
    }
    // Moved aside, then checked: what was moved must be the lock judged stale, not one a third
    // daemon took meanwhile (that one goes back, and this download waits for the next ask).
    const aside = `${path}.${process.pid}.stale`
    try {
      renameSync(path, aside)
    } catch {
      continue
    }
    if (readLock(aside)?.text !== held.text) {
      try {
        linkSync(aside, path)
      } catch {}
      rmSync(aside, { force: true })
      throw new DownloadError(`another daemon took the lock of ${staging} just now; it is not fetched twice`)
    }
    rmSync(aside, { force: true })
    dlog.info('took over the lock of a partial download', { lock: path, holder: held.text, why: stale })
  }
  throw new DownloadError(`could not lock ${staging}`)
}

const PARTIAL_NAME = /^(\..+\.partial)(\.lock|\.etag)?$/

/** The newest mtime under `path` (a file, or a directory's files). */
function newestWrite(path: string): number {
  try {
    const st = lstatSync(path)
    if (!st.isDirectory()) return st.mtimeMs
    let newest = st.mtimeMs
    for (const name of readdirSync(path)) newest = Math.max(newest, newestWrite(join(path, name)))
    return newest
  } catch {
    return 0
  }
}

/**
 * docs/worker.md "Downloads": removes the partial downloads under `modelsDir` (four levels deep, as
 * models nest) that nobody has written for `maxAgeMs` and no live lock holds: what an ask that
 * never came back left. Each is removed holding its lock (taken over from a dead holder as a
 * download would), so never while another daemon writes it. Only names of the downloader's own
 * making are touched. Returns their paths.
 */
export function reclaimPartials(modelsDir: string, o: { maxAgeMs?: number; nowMs?: number } = {}): string[] {
  const maxAge = o.maxAgeMs ?? PARTIAL_RECLAIM_MS
  const now = o.nowMs ?? Date.now()
  const removed: string[] = []
  const walk = (dir: string, depth: number) => {
    let names: Dirent[]
    try {
      names = readdirSync(dir, { withFileTypes: true })
    } catch {
      return
    }
    const partials = new Set<string>()
    for (const d of names) {
      const m = PARTIAL_NAME.exec(d.name)
      if (m) partials.add(m[1]!)
      else if (!d.name.startsWith('.') && d.isDirectory() && depth < 4) walk(join(dir, d.name), depth + 1)
    }
    for (const name of partials) {
      const partial = join(dir, name)
      const held = readLock(`${partial}.lock`)
      if (held && !staleness(held, now)) continue
      const last = Math.max(newestWrite(partial), newestWrite(`${partial}.etag`), held?.mtimeMs ?? 0)
      if (now - last < maxAge) continue
      // Removed only under its lock, taken as a download takes it: a daemon that took it meanwhile
      // (resuming that partial on a shared disk) keeps it, and none can take it while it goes.
      let lock: { release(): void }
      try {
        lock = lockPartial(partial, realTimers, log)
      } catch {
        continue
      }
      try {
        if (now - Math.max(newestWrite(partial), newestWrite(`${partial}.etag`)) < maxAge) continue
        for (const p of [partial, `${partial}.etag`]) rmSync(p, { recursive: true, force: true })
      } finally {
        lock.release()
      }
      log.info('removed a partial download nobody finished', {
        path: partial,
        last_written: new Date(last).toISOString(),
      })
      removed.push(partial)
    }
  }
  walk(modelsDir, 0)
  return removed
}

/** A pull_models ask from a hub (docs/api.md §7), downloaded where the runtime's `layout` says. */
export async function pullFromHub(
  task: PullModel,
  o: {
    /** Where the model's files land (the runtime's business: ManagedEngine.layoutFor). */
    layout: (name: string, files: DownloadFile[]) => ModelLayout
    hub: HubAccess
    maxDownloadGb: number
    onProgress?: (p: DownloadProgress) => void
    signal?: AbortSignal
  } & Pick<DownloadRequest, 'timers' | 'backoff' | 'retries' | 'stallMs' | 'freeBytes' | 'hash'>,
): Promise<Downloaded & { dest: string }> {
  if (task.source_type !== HUB_SOURCE_TYPE || !task.source_ref || !task.files?.length)
    throw new DownloadError(
      `catalogue entry ${task.catalogue_id} names no hub download (docs/api.md §7 pull_models)`,
    )
  const layout = o.layout(
    task.runtime_model_id,
    task.files.map((f) => ({ path: f.path, sha256: f.sha256, size_bytes: f.size_bytes ?? null })),
  )
  const done = await downloadModel({
    ...o,
    repo: task.source_ref,
    revision: task.source_revision || DEFAULT_REVISION,
    layout,
    maxBytes: o.maxDownloadGb * GB,
    sizeHint: task.size_gb ? Math.round(task.size_gb * GB) : null,
  })
  return { ...done, dest: layout.dest }
}

const encodePath = (p: string) => p.split('/').map(encodeURIComponent).join('/')

export const fileUrl = (hub: string, repo: string, revision: string, path: string) =>
  `${hub.replace(/\/+$/, '')}/${encodePath(repo)}/resolve/${encodeURIComponent(revision)}/${encodePath(path)}`

function sizeOf(path: string): number {
  try {
    const s = statSync(path)
    return s.isFile() ? s.size : 0
  } catch {
    return 0
  }
}

function truncate(path: string): number {
  rmSync(path, { force: true })
  rmSync(`${path}.etag`, { force: true })
  return 0
}

async function headSize(url: string, headers: Record<string, string>, signal: AbortSignal) {
  try {
    const res = await fetch(url, { method: 'HEAD', headers, signal })
    if (!res.ok) return null
    const n = Number(res.headers.get('content-length'))
    return Number.isSafeInteger(n) && n >= 0 && res.headers.has('content-length') ? n : null
  } catch {
    return null
  }
}

/** An ETag a Range request may be conditioned on: a strong one (RFC 9110 §13.1.5). */
const strongEtag = (res: Response) => {
  const etag = res.headers.get('etag')
  return etag && !etag.startsWith('W/') ? etag : null
}

/** Hashes the kept prefix of a partial file (resuming an earlier run). */
async function hashPrefix(path: string, bytes: number): Promise<Bun.CryptoHasher> {
  const hasher = new Bun.CryptoHasher('sha256')
  for await (const chunk of Bun.file(path).slice(0, bytes).stream()) hasher.update(chunk)
  return hasher
}

class Transient extends Error {
  constructor(
    message: string,
    readonly retryAfterMs: number | null = null,
  ) {
    super(message)
  }
}

async function fetchFile(
  f: FileState,
  req: DownloadRequest,
  headers: Record<string, string>,
  signal: AbortSignal,
  progress: { completed: number },
  onBytes: () => void,
) {
  const timers = req.timers ?? realTimers
  const backoff = req.backoff ?? { baseMs: 1000, maxMs: 30_000 }
  const retries = req.retries ?? 5
  let hasher = f.kept > 0 ? await hashPrefix(f.partial, f.kept) : new Bun.CryptoHasher('sha256')
  let etag: string | null =
    f.kept > 0 && existsSync(`${f.partial}.etag`) ? readFileSync(`${f.partial}.etag`, 'utf8') : null
  // Appending: the partial holds exactly the kept bytes. Bun's file sink writes in large blocks,
  // which keeps a download near the speed of a plain fetch to disk (bench/download.ts).
  const fd = openSync(f.partial, 'a')
  const sink = Bun.file(fd).writer({ highWaterMark: 1 << 20 })
  const restart = async () => {
    await sink.flush()
    ftruncateSync(fd, 0)
    progress.completed -= f.kept
    f.kept = 0
    hasher = new Bun.CryptoHasher('sha256')
  }
  try {
    let fruitless = 0
    let interrupted = 0
    for (;;) {
      if (f.size !== null && f.kept === f.size) break
      const before = f.kept
      try {
        const done = await attempt()
        if (done) break
      } catch (e) {
        if (signal.aborted) throw new DownloadError('the download was stopped')
        if (!(e instanceof Transient)) throw e
        fruitless = f.kept > before ? 0 : fruitless + 1
        interrupted++
        if (fruitless >= retries)
          throw new DownloadError(
            `${f.path}: ${e.message} (${retries} attempts in a row brought no new byte)`,
          )
        // A hub that sends a little each time and cuts again never ends a run of fruitless attempts.
        if (interrupted >= retries * INTERRUPTIONS_PER_RETRY)
          throw new DownloadError(
            `${f.path}: ${e.message} (interrupted ${interrupted} times; ${f.kept} of ${f.size ?? 'its'} bytes had arrived)`,
          )
        const wait = retryDelay(fruitless, backoff, e.retryAfterMs)
        log.warn('download interrupted; resuming', {
          path: f.path,
          kept_bytes: f.kept,
          error: e.message,
          retry_in_ms: wait,
        })
        await timers.sleep(wait, signal)
        if (signal.aborted) throw new DownloadError('the download was stopped')
      }
    }
  } finally {
    try {
      await sink.end()
    } finally {
      closeSync(fd)
    }
  }
  const got = hasher.digest('hex')
  if (got !== f.sha256) {
    throw new DownloadError(
      `sha256 of ${f.path} is ${got}, the catalogue's is ${f.sha256}; the file was deleted`,
    )
  }

  /** One request; true when the file is whole. Throws Transient for what a retry may cure. */
  async function attempt(): Promise<boolean> {
    const h: Record<string, string> = { ...headers }
    if (f.kept > 0) {
      h.range = `bytes=${f.kept}-`
      if (etag) h['if-range'] = etag
    }
    const stall = new AbortController()
    let last = timers.nowMs()
    const stallMs = req.stallMs ?? 60_000
    // Asleep until `stallMs` after the last byte; a byte meanwhile moves the wake-up on.
    const watchdog = new AbortController()
    void (async () => {
      for (;;) {
        const idle = timers.nowMs() - last
        if (idle >= stallMs) return stall.abort()
        await timers.sleep(stallMs - idle, watchdog.signal)
        if (watchdog.signal.aborted) return
      }
    })()
    try {
      let res: Response
      try {
        res = await fetch(f.url, { headers: h, signal: AbortSignal.any([signal, stall.signal]) })
      } catch (e) {
        throw new Transient(`the hub could not be reached: ${(e as Error).message}`)
      }
      if (res.status === 416 && f.kept > 0) {
        // The kept prefix is the whole file (its size unknown until now), or the file shrank.
        await res.body?.cancel()
        const total = Number(/\/(\d+)$/.exec(res.headers.get('content-range') ?? '')?.[1])
        if (total === f.kept) return true
        await restart()
        throw new Transient('the hub refused the range asked for')
      }
      if (res.status >= 500 || res.status === 429) {
        await res.body?.cancel()
        throw new Transient(`the hub answered ${res.status}`, retryAfterMs(res.headers.get('retry-after')))
      }
      if (res.status !== 200 && res.status !== 206) {
        await res.body?.cancel()
        throw new DownloadError(`the hub answered ${res.status} for ${f.path} (${req.repo}@${req.revision})`)
      }
      if (res.status === 206) {
        const start = Number(/^bytes (\d+)-/.exec(res.headers.get('content-range') ?? '')?.[1])
        if (start !== f.kept) {
          await res.body?.cancel()
          await restart()
          throw new Transient('the hub answered another range than the one asked for')
        }
      } else if (f.kept > 0) {
        // 200 to a Range request: the file changed (If-Range) or the hub ignores ranges. Start over.
        log.info('the hub sent the whole file again; starting it over', { path: f.path })
        await restart()
      }
      const newEtag = strongEtag(res)
      if (newEtag !== etag) {
        etag = newEtag
        if (etag) writeFileSync(`${f.partial}.etag`, etag)
        else rmSync(`${f.partial}.etag`, { force: true })
      }
      const length = Number(res.headers.get('content-length'))
      if (res.headers.has('content-length') && Number.isSafeInteger(length)) {
        const whole = f.kept + length
        if (f.size === null) f.size = whole
        else if (whole !== f.size)
          throw new DownloadError(`the hub serves ${whole} bytes of ${f.path}, the catalogue says ${f.size}`)
      }
      if (!res.body) throw new Transient('the hub sent no body')
      try {
        for await (const chunk of res.body) {
          last = timers.nowMs()
          if (f.size !== null && f.kept + chunk.length > f.size)
            throw new DownloadError(`the hub sent more than the ${f.size} bytes of ${f.path}`)
          sink.write(chunk)
          hasher.update(chunk)
          f.kept += chunk.length
          progress.completed += chunk.length
          onBytes()
        }
      } catch (e) {
        if (e instanceof DownloadError) throw e
        throw new Transient(
          stall.signal.aborted
            ? `no byte for ${stallMs / 1000} s`
            : `the connection dropped: ${(e as Error).message}`,
        )
      }
      // A body that ends early without an error (no length to say so) is a drop as well.
      if (f.size !== null && f.kept < f.size) throw new Transient('the connection ended early')
      return true
    } finally {
      watchdog.abort()
    }
  }
}

/** Leaves nothing of a failed download behind. */
function discard(layout: ModelLayout, staging: string, files: FileState[]) {
  if (layout.kind === 'dir') rmSync(staging, { recursive: true, force: true })
  else for (const f of files) truncate(f.partial)
}

/**
 * Every file matched: the model appears in one step (of its file, or of its directory), only where
 * nothing is. False, with nothing moved, when the destination is taken.
 */
function place(layout: ModelLayout, staging: string, files: FileState[]): boolean {
  if (layout.kind === 'file') {
    rmSync(`${staging}.etag`, { force: true })
    // link(2) fails on an existing name where rename(2) would replace it.
    try {
      linkSync(staging, layout.dest)
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      if (code === 'EEXIST') return false
      // A filesystem without hard links: look, then rename (the window is the two calls).
      if (exists(layout.dest)) return false
      renameSync(staging, layout.dest)
      return true
    }
    unlinkSync(staging)
    return true
  }
  for (const f of files) {
    rmSync(`${f.partial}.etag`, { force: true })
    renameSync(f.partial, join(staging, f.rel))
  }
  if (exists(layout.dest)) return false
  renameSync(staging, layout.dest)
  return true
}
