import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
// A stand-in model hub for tests and benchmarks (never the internet): Bun.serve on loopback serving
// files in the Hugging Face layout, `GET|HEAD /{owner}/{repo}/resolve/{revision}/{path}`, with a
// strong `ETag` (the quoted sha256 of the bytes), `Accept-Ranges: bytes`, and `Range: bytes=N-`
// answered 206 (or 200 with the whole file when `If-Range` names another ETag, as RFC 9110 says).
//
// Faults, per file (`misbehave`):
//   wrongBytes        serve other bytes of the same length (the digest check must catch it)
//   stopAt N, times   end the response once it reaches byte N of the file, short of its length
//                     ('once': only the first response; 'always': every response, so no resume
//                     ever gets further)
//   status            answer that status (404, 503 …) every time
//   trickle N         every response sends N bytes from where it starts, then ends short (a hub
//                     that keeps cutting the connection, each resume a little further)
//   stallAt N, times  send the file up to byte N, then nothing more, the response left open (a
//                     hub that stalls: only the client's own watchdog ends it); 'once' or 'always'
// `token`: every request must carry `Authorization: Bearer <token>` (else 401).
// `compress`: like a proxy that compresses, a whole-file answer to a request whose Accept-Encoding
// allows gzip is sent gzipped (`Content-Encoding: gzip`, the compressed length as Content-Length).
// `onRequest`: called with each request as it arrives, before it is answered.

export interface HubRequest {
  method: string
  path: string
  range: string | null
  ifRange: string | null
  authorization: string | null
  acceptEncoding: string | null
  status: number
}

export interface Misbehaviour {
  wrongBytes?: boolean
  stopAt?: number
  times?: 'once' | 'always'
  status?: number
  stallAt?: number
  trickle?: number
}

export interface StandInHub {
  url: string
  /** Every request, in order, with the status answered. */
  requests: HubRequest[]
  /** Serves `bytes` at `{repo}/resolve/{revision}/{path}`; its ETag is their sha256. */
  put(repo: string, path: string, bytes: Uint8Array, revision?: string): { sha256: string; size: number }
  /**
   * Serves the file at `disk` (its bytes never in memory; sent as a file server sends a file,
   * sendfile), with the sha256 and size the caller knows. Faults apply to `put` files only.
   */
  putFile(repo: string, path: string, disk: string, sha256: string, revision?: string): void
  misbehave(repo: string, path: string, m: Misbehaviour, revision?: string): void
  stop(): void
}

const key = (repo: string, revision: string, path: string) => `/${repo}/resolve/${revision}/${path}`

export const sha256Of = (bytes: Uint8Array) => new Bun.CryptoHasher('sha256').update(bytes).digest('hex')

export function startStandInHub(
  o: {
    token?: string
    bytesPerSecond?: number
    compress?: boolean
    onRequest?: (r: { method: string; path: string }) => void
  } = {},
): StandInHub {
  const files = new Map<string, { bytes: Uint8Array | null; disk?: string; size: number; etag: string }>()
  const faults = new Map<string, Misbehaviour & { served: number }>()
  const requests: HubRequest[] = []

  const answer = (req: Request): Response => {
    const url = new URL(req.url)
    const path = decodeURIComponent(url.pathname)
    o.onRequest?.({ method: req.method, path })
    const record = (status: number) =>
      requests.push({
        method: req.method,
        path,
        range: req.headers.get('range'),
        ifRange: req.headers.get('if-range'),
        authorization: req.headers.get('authorization'),
        acceptEncoding: req.headers.get('accept-encoding'),
        status,
      })
    if (o.token && req.headers.get('authorization') !== `Bearer ${o.token}`) {
      record(401)
      return new Response('unauthorized', { status: 401 })
    }
    const file = files.get(path)
    const fault = faults.get(path)
    if (!file || (req.method !== 'GET' && req.method !== 'HEAD')) {
      record(404)
      return new Response('Entry not found', { status: 404 })
    }
    if (fault?.status) {
      record(fault.status)
      return new Response('the hub is not well', { status: fault.status })
    }
    const size = file.size
    let start = 0
    const range = /^bytes=(\d+)-$/.exec(req.headers.get('range') ?? '')
    const ifRange = req.headers.get('if-range')
    if (range && (ifRange === null || ifRange === file.etag)) {
      start = Number(range[1])
      if (start >= size) {
        record(416)
        return new Response(null, { status: 416, headers: { 'content-range': `bytes */${size}` } })
      }
    }
    const status = start > 0 ? 206 : 200
    record(status)
    const headers: Record<string, string> = {
      etag: file.etag,
      'accept-ranges': 'bytes',
      'content-length': String(size - start),
      'content-type': 'application/octet-stream',
      ...(status === 206 ? { 'content-range': `bytes ${start}-${size - 1}/${size}` } : {}),
    }
    const gzip =
      o.compress && status === 200 && file.bytes && /\bgzip\b/.test(req.headers.get('accept-encoding') ?? '')
    if (gzip) {
      const packed = Bun.gzipSync(file.bytes as Uint8Array<ArrayBuffer>)
      headers['content-encoding'] = 'gzip'
      headers['content-length'] = String(packed.length)
      return new Response(req.method === 'HEAD' ? null : packed, { status, headers })
    }
    if (req.method === 'HEAD') return new Response(null, { status, headers })
    if (!file.bytes)
      return new Response(
        o.bytesPerSecond ? paced(file.disk!, start, o.bytesPerSecond) : Bun.file(file.disk!).slice(start),
        { status, headers },
      )
    let bytes = file.bytes
    if (fault?.wrongBytes) bytes = bytes.map((b) => b ^ 0xff)
    const served = fault ? fault.served++ : 0
    if (fault?.stallAt !== undefined && !(fault.times === 'once' && served > 0)) {
      const prefix = bytes.subarray(start, Math.max(start, fault.stallAt))
      let sent = false
      const held = new ReadableStream<Uint8Array>({
        // The prefix, then a pull that never ends: the connection stays open with nothing on it.
        pull: (c) => {
          if (sent || !prefix.length) return new Promise<void>(() => {})
          sent = true
          c.enqueue(prefix)
        },
      })
      return new Response(held, { status, headers })
    }
    const stopAt = fault?.trickle !== undefined ? start + fault.trickle : fault?.stopAt
    if (stopAt === undefined || (fault!.times === 'once' && served > 0))
      return new Response(bytes.subarray(start), { status, headers })
    // Up to byte `stopAt` of the file (nothing when the response starts there), then the body
    // ends, short of the file: the client holds exactly what was sent and must see that the rest
    // never came (it knows the size from HEAD or the catalogue). Ending the stream, rather than
    // erroring it, is what makes this exact: an error cuts the connection whether or not the
    // server has written the prefix out yet.
    const prefix = bytes.subarray(start, Math.max(start, stopAt))
    // Pulled, not filled at once: a body complete from the start would be sent with its own
    // (short) Content-Length, which is a hub lying about the file, not a cut. With nothing to send
    // the connection is cut outright (erroring the stream; nothing written can be lost).
    let sent = false
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        if (!prefix.length) return c.error()
        if (!sent) {
          sent = true
          return c.enqueue(prefix)
        }
        c.close()
      },
    })
    return new Response(body, { status, headers })
  }

  const server = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: answer })
  return {
    url: `http://127.0.0.1:${server.port}`,
    requests,
    put(repo, path, bytes, revision = 'main') {
      const sha256 = sha256Of(bytes)
      files.set(key(repo, revision, path), { bytes, size: bytes.length, etag: `"${sha256}"` })
      return { sha256, size: bytes.length }
    },
    putFile(repo, path, disk, sha256, revision = 'main') {
      files.set(key(repo, revision, path), {
        bytes: null,
        disk,
        size: Bun.file(disk).size,
        etag: `"${sha256}"`,
      })
    },
    misbehave(repo, path, m, revision = 'main') {
      faults.set(key(repo, revision, path), { ...m, served: 0 })
    },
    stop: () => void server.stop(true),
  }
}

/** The file from `start`, sent no faster than `rate` bytes a second (a network link's speed). */
function paced(disk: string, start: number, rate: number): ReadableStream<Uint8Array> {
  const file = Bun.file(disk)
  const step = 1 << 20
  let at = start
  const began = performance.now()
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      if (at >= file.size) return c.close()
      const due = began + ((at - start) / rate) * 1000
      if (due > performance.now()) await Bun.sleep(due - performance.now())
      const chunk = new Uint8Array(await file.slice(at, at + step).arrayBuffer())
      at += chunk.length
      c.enqueue(chunk)
    },
  })
}

/** `n` bytes from a seeded generator: the same file on every run. */
export function seededBytes(n: number, seed = 1): Uint8Array {
  const out = new Uint8Array(n)
  let x = seed >>> 0 || 1
  for (let i = 0; i < n; i++) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    out[i] = x & 0xff
  }
  return out
}

// `bun test/helpers/hub.ts BYTES [MB_PER_SECOND]`: a hub in its own process (benchmarks) serving one
// seeded file of BYTES at /bench/model-GGUF/resolve/main/model.gguf, at most MB_PER_SECOND when
// given (a network link's speed); prints its URL, the file's path in the hub, its sha256 and size as
// one JSON line.
if (import.meta.main) {
  const size = Number(process.argv[2] ?? 1e8)
  const mbps = Number(process.argv[3] ?? 0)
  const hub = startStandInHub(mbps > 0 ? { bytesPerSecond: mbps * 1e6 } : {})
  const path = 'model.gguf'
  // From disk, as a hub's file server sends it: serving from memory would spend this machine's
  // CPU copying what a real hub's machine would.
  const dir = mkdtempSync(join(tmpdir(), 'gk-hub-'))
  const disk = join(dir, path)
  const bytes = seededBytes(size)
  await Bun.write(disk, bytes)
  const sha256 = sha256Of(bytes)
  hub.putFile('bench/model-GGUF', path, disk, sha256)
  const clean = () => rmSync(dir, { recursive: true, force: true })
  process.on('SIGTERM', () => {
    clean()
    process.exit(0)
  })
  process.on('exit', clean)
  console.log(JSON.stringify({ url: hub.url, repo: 'bench/model-GGUF', path, sha256, size }))
}
