import type { BlobStore } from './store'

// A run of a batch's request lines read from its input blob in the order they run (docs/api.md §16
// shards, §6 "Execution order"). In the file order the run is one byte range (one range read). In
// an execution order of its own each line is a span somewhere in the file: the spans are read in
// windows — consecutive spans whose gaps are small are one range read, the bytes between them
// dropped — several windows ahead at once, each line sent with its terminator (an LF where the
// file's last line has none). Memory holds
// at most the windows in flight, whatever the run; on S3 a shard of scattered lines is a few dozen
// ranged GETs in parallel, not one a line.

/** [start, end) bytes of a blob; end null = to its end. */
export interface ByteRange {
  start: number
  end: number | null
}

/** Where a run of request lines lies in the input, in the order they run. */
export interface LineSpans {
  ranges: ByteRange[]
  /**
   * true: each range is one line, up to the next request line (an execution order of its own); false:
   * the run is one stretch of the file (the file order).
   */
  lines: boolean
}

/** The widest gap read (and dropped) to keep two spans in one window: on S3, less than a round trip. */
const MAX_GAP_BYTES = 256 * 1024
/** Largest window (one line longer than this is a window by itself). */
const MAX_WINDOW_BYTES = 2 * 1024 * 1024
/** Windows read ahead: S3 answers each after a round trip, so several are under way at once. */
const AHEAD = { local: 2, s3: 8 } as const

const LF = new Uint8Array([10])

interface Window {
  start: number
  end: number
  spans: ByteRange[]
}

/** The spans grouped into windows, in order. */
export function windowsOf(ranges: readonly ByteRange[]): Window[] {
  const out: Window[] = []
  let w: Window | null = null
  for (const r of ranges) {
    const end = r.end ?? r.start
    if (w && r.start >= w.end && r.start - w.end <= MAX_GAP_BYTES && end - w.start <= MAX_WINDOW_BYTES) {
      w.end = end
      w.spans.push(r)
      continue
    }
    w = { start: r.start, end, spans: [r] }
    out.push(w)
  }
  return out
}

/**
 * The bytes of `spans` of blob `key`, streamed in their order; null when there is no such blob. In
 * the file order this is the one range read; each line of an execution order ends with an LF.
 */
export async function readSpans(
  blobs: BlobStore,
  key: string,
  spans: LineSpans,
): Promise<ReadableStream<Uint8Array> | null> {
  if (!spans.lines) {
    const [r] = spans.ranges
    return r ? blobs.readRange(key, r.start, r.end) : null
  }
  if ((await blobs.size(key)) === null) return null
  const windows = windowsOf(spans.ranges)
  const ahead = AHEAD[blobs.engine]
  const reads: Promise<Uint8Array>[] = []
  let next = 0
  const read = async (w: Window) => {
    const body = await blobs.readRange(key, w.start, w.end)
    if (!body) throw new Error(`blob ${key} disappeared while it was read`)
    return Bun.readableStreamToBytes(body)
  }
  const fill = () => {
    while (next < windows.length && reads.length < ahead) {
      const p = read(windows[next++]!)
      p.catch(() => {}) // awaited in order below; a failure surfaces there
      reads.push(p)
    }
  }
  let sent = 0
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      fill()
      const p = reads.shift()
      if (!p) return controller.close()
      const bytes = await p
      const w = windows[sent++]!
      for (const s of w.spans) {
        const line = bytes.subarray(s.start - w.start, (s.end ?? s.start) - w.start)
        controller.enqueue(line)
        if (line[line.length - 1] !== 10) controller.enqueue(LF)
      }
      fill()
    },
    cancel() {
      next = windows.length
    },
  })
}
