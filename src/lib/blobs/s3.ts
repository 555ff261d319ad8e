import { S3Client } from 'bun'
import { type BlobStore, BlobStoreUnavailableError, type BlobWriter, checkKey, SCRATCH_PREFIX } from './store'

// S3-compatible object storage through Bun's built-in client (docs/api.md §12). A blob is streamed
// into a multipart upload of its final key that is completed only by publish(): Bun sends the
// last part and CompleteMultipartUpload when the stream it reads closes, and completes nothing
// when that stream errors, so an aborted or failed upload leaves no object. (The writer's
// end(error) does complete the upload, which is why the stream form is used.) A process killed
// mid-upload leaves an incomplete multipart upload, which is not an object; a bucket lifecycle
// rule (AbortIncompleteMultipartUpload) reclaims its parts (docs/scale-out.md "Object storage (S3)").
//
// Listing never follows continuation tokens: a page that says it is truncated is split by the
// next character of the key (keys are checkKey's alphabet), until every page is complete. That
// is correct whatever order a server returns keys in, and needs nothing a server may implement
// badly (s3rver's tokens need DES, which Bun lacks, and its pages follow unsorted directory
// reads, so consecutive pages can overlap or skip keys).

export interface S3Settings {
  bucket: string
  prefix: string
  endpoint?: string
  region?: string
  accessKeyId?: string
  secretAccessKey?: string
}

/** s3://BUCKET[/PREFIX] → bucket and key prefix ('' or ending in '/'); null when malformed. */
export function parseStorageUrl(url: string): { bucket: string; prefix: string } | null {
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(\/[0-9A-Za-z._\-/]*)?$/.exec(url)
  if (!m) return null
  const path = (m[2] ?? '').replace(/^\/+|\/+$/g, '')
  if (path.split('/').some((s) => s === '.' || s === '..')) return null
  return { bucket: m[1]!, prefix: path ? `${path}/` : '' }
}

const PART_SIZE = 8 * 1024 * 1024
const PAGE = 1000
// Every character a key may hold after a prefix (checkKey), in the order tried when a page is full.
const KEY_CHARS = '-/0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz'

export class S3BlobStore implements BlobStore {
  readonly engine = 's3' as const
  private readonly client: S3Client
  private readonly prefix: string

  constructor(settings: S3Settings) {
    this.prefix = settings.prefix
    this.client = new S3Client({
      bucket: settings.bucket,
      endpoint: settings.endpoint,
      region: settings.region,
      accessKeyId: settings.accessKeyId,
      secretAccessKey: settings.secretAccessKey,
    })
  }

  private name(key: string) {
    return this.prefix + checkKey(key)
  }

  localPath() {
    return null
  }

  create(key: string): BlobWriter {
    const name = this.name(key)
    const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>(undefined, {
      highWaterMark: 4,
    })
    const sink = writable.getWriter()
    let bytes = 0
    // Bun reads `readable` part by part while bytes arrive; the upload completes when it closes.
    const upload = this.client.write(name, new Response(readable), { partSize: PART_SIZE, queueSize: 2 })
    let uploadFailure: unknown = null
    upload.catch((e) => {
      uploadFailure ??= e
      // The upload gave up: unblock a writer waiting on backpressure.
      sink.abort(e).catch(() => {})
    })
    let published = false
    const remove = () => this.remove(key)
    return {
      async write(chunk) {
        if (uploadFailure) throw uploadFailure
        await sink.ready
        bytes += chunk.length
        await sink.write(chunk)
      },
      async publish() {
        await sink.close()
        await upload
        published = true
        return bytes
      },
      async abort() {
        await sink.abort(new Error('upload aborted')).catch(() => {})
        await upload.catch(() => {})
        if (published) await remove().catch(() => {})
      },
    }
  }

  async read(key: string) {
    const file = this.client.file(this.name(key))
    return (await file.exists()) ? file.stream() : null
  }

  async readRange(key: string, start: number, end: number | null) {
    const file = this.client.file(this.name(key))
    if (!(await file.exists())) return null
    // A ranged GET: only the shard's bytes cross the network.
    return (end === null ? file.slice(start) : file.slice(start, end)).stream()
  }

  body(key: string) {
    return this.read(key)
  }

  async size(key: string) {
    try {
      return (await this.client.stat(this.name(key))).size
    } catch (e) {
      if ((e as { code?: string }).code === 'NoSuchKey' || /not found|NoSuchKey/i.test(String(e))) return null
      throw e
    }
  }

  async remove(key: string) {
    await this.client.delete(this.name(key))
  }

  async *list(prefix: string): AsyncGenerator<string> {
    yield* this.listNames(this.prefix + prefix)
  }

  private async *listNames(full: string): AsyncGenerator<string> {
    const page = await this.client.list({ prefix: full, maxKeys: PAGE })
    const keys = (page.contents ?? []).map((c) => c.key)
    if (!page.isTruncated) {
      for (const k of keys) yield k.slice(this.prefix.length)
      return
    }
    // A full page: the exact key, then one narrower listing per possible next character.
    if (await this.client.exists(full)) yield full.slice(this.prefix.length)
    for (const c of KEY_CHARS) yield* this.listNames(full + c)
  }

  async prepare() {
    // Write and delete a probe, then list the scratch prefix: proves the bucket exists and the
    // credentials may write, delete and list, before the server listens (docs/api.md §12 bad input).
    const probe = `${SCRATCH_PREFIX}probe-${crypto.randomUUID()}`
    let leftovers: string[]
    try {
      await this.client.write(this.name(probe), 'gridkeep')
      await this.client.delete(this.name(probe))
      // Listed first, then deleted: deleting while a listing is split would shift its pages.
      leftovers = await Array.fromAsync(this.list(SCRATCH_PREFIX))
    } catch (e) {
      throw new BlobStoreUnavailableError(`STORAGE_URL: the bucket cannot be used (${describe(e)})`)
    }
    for (const key of leftovers) await this.remove(key)
    return leftovers.length
  }
}

/** The error's code or class only: S3 error text may quote request details. */
function describe(e: unknown): string {
  const code = (e as { code?: unknown }).code
  if (typeof code === 'string' && /^[A-Za-z_]{1,64}$/.test(code)) return code
  return e instanceof Error ? e.name : 'unknown error'
}
