// What the client shows. On a terminal (stdout is a TTY, no --json): sentences, tables and one live
// line redrawn in place. Otherwise — a pipe, a file, or --json — one JSON object per line on
// stdout, one per change, for scripts to follow; sentences meant for a person then go to stderr,
// so stdout stays parseable. Errors always go to stderr (and, as JSON, to stdout too).

export interface Streams {
  stdout(text: string): void
  stderr(text: string): void
}

export const processStreams: Streams = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
}

export class View {
  private live = ''

  constructor(
    readonly json: boolean,
    private readonly streams: Streams = processStreams,
  ) {}

  /** One JSON line (JSON mode only). */
  event(name: string, fields: Record<string, unknown>): void {
    if (this.json) this.streams.stdout(`${JSON.stringify({ event: name, ...fields })}\n`)
  }

  /** An object of the API as it is, one JSON line (JSON mode only): a list item, a batch. */
  data(object: unknown): void {
    if (this.json) this.streams.stdout(`${JSON.stringify(object)}\n`)
  }

  /** A line for a person: stdout on a terminal, stderr in JSON mode. */
  say(text: string): void {
    this.clearLive()
    if (this.json) this.streams.stderr(`${text}\n`)
    else this.streams.stdout(`${text}\n`)
  }

  /** A line for a person that is the command's answer (a table): stdout, terminal only. */
  print(text: string): void {
    this.clearLive()
    this.streams.stdout(`${text}\n`)
  }

  /** A warning or an error, always on stderr. */
  warn(text: string): void {
    this.clearLive()
    this.streams.stderr(`${text}\n`)
  }

  /** Redraws the live line (terminal only). */
  setLive(text: string): void {
    if (this.json) return
    this.live = text
    this.streams.stdout(`\r\x1b[K${text}`)
  }

  /** Ends the live line, leaving its last text on the screen. */
  keepLive(): void {
    if (this.live) this.streams.stdout('\n')
    this.live = ''
  }

  clearLive(): void {
    if (!this.live) return
    this.streams.stdout('\r\x1b[K')
    this.live = ''
  }
}

const group = (n: number) => Math.round(n).toLocaleString('en-US')

export const formatCount = group

/** 1536 → "1.5 KB", 200000000 → "200.0 MB" (decimal units, as curl and disks count). */
export function formatBytes(bytes: number): string {
  if (bytes < 1000) return `${bytes} B`
  const units = ['KB', 'MB', 'GB', 'TB']
  let value = bytes
  let unit = 'B'
  for (const u of units) {
    if (value < 1000) break
    value /= 1000
    unit = u
  }
  return `${value.toFixed(1)} ${unit}`
}

/** 42 → "42 s", 125 → "2 min 5 s", 7260 → "2 h 1 min"; null → "?". */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '?'
  const s = Math.max(0, Math.ceil(seconds))
  if (s < 60) return `${s} s`
  if (s < 3600) return s % 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s / 60} min`
  const m = Math.floor(s / 60)
  return m % 60 ? `${Math.floor(m / 60)} h ${m % 60} min` : `${m / 60} h`
}

/** 0.25 → "0.25", 3.16 → "3.2", 1234.5 → "1,235". */
export function formatRate(rate: number): string {
  if (rate >= 100) return group(rate)
  return rate >= 1 ? rate.toFixed(1) : rate.toFixed(2)
}

/** `[#######.............]` for a fraction of 0–1. */
export function bar(fraction: number, width = 24): string {
  const filled = Math.max(0, Math.min(width, Math.round(fraction * width)))
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`
}

/** A table: columns padded to their widest cell, the header first. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)))
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd()
  return [line(header), ...rows.map(line)].join('\n')
}

/** A Unix time as local "YYYY-MM-DD HH:MM". */
export function formatTime(unix: number | null): string {
  if (unix === null) return '-'
  const d = new Date(unix * 1000)
  const p = (n: number) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`
}

/**
 * Throughput over the last half-minute from successive samples of a count, and the time left at
 * that rate. A count that goes down (a shard requeued) starts the samples over.
 */
export class RateMeter {
  private samples: { at: number; done: number }[] = []

  constructor(private readonly windowMs = 30_000) {}

  /** Adds a sample; returns the rate per second, or null until two samples half a second apart exist. */
  sample(done: number, at = performance.now()): number | null {
    const last = this.samples.at(-1)
    if (last && done < last.done) this.samples = []
    this.samples.push({ at, done })
    while (this.samples.length > 2 && at - this.samples[1]!.at >= this.windowMs) this.samples.shift()
    const first = this.samples[0]!
    if (at - first.at < 500) return null
    return ((done - first.done) * 1000) / (at - first.at)
  }
}

/** Seconds until `remaining` is done at `rate`; null when that cannot be said. */
export function timeLeft(remaining: number, rate: number | null): number | null {
  if (remaining <= 0) return 0
  if (rate === null || rate <= 0) return null
  return remaining / rate
}
