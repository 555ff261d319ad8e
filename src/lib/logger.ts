// Structured JSON-line logs (docs/operations.md "Logs"). One process-wide logger: the server is one process, and
// tests swap the sink to read everything the suite logged.
//
// Secrets never reach the output (docs/api.md: secrets never reach logs). Callers do not log them, and as
// a second line of defence every record is scrubbed: fields named like secrets are replaced, and
// anything shaped like a raw key or a JWT inside any string is masked.

export type Level = 'debug' | 'info' | 'warn' | 'error'
const RANK: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 }

type Fields = Record<string, unknown>
type Sink = (line: string) => void

const stdoutSink: Sink = (line) => {
  process.stdout.write(line + '\n')
}

let sink: Sink = stdoutSink
let threshold = RANK.info

export function setLogLevel(level: Level) {
  threshold = RANK[level]
}

/** Whether a record at `level` would be written: lets hot paths skip building one. */
export const logEnabled = (level: Level) => RANK[level] >= threshold

/** Replaces the output; returns a function restoring the previous one. */
export function setLogSink(next: Sink): () => void {
  const prev = sink
  sink = next
  return () => {
    sink = prev
  }
}

const SECRET_FIELD = /pass(word)?|secret|token|authorization|api_?key|^key$|jwt|cookie|smtp_url/i
const RAW_KEY = /gk-[0-9A-Za-z]{40}/g
const JWT_SHAPE = /eyJ[\w-]{5,}\.eyJ[\w-]{5,}\.[\w-]+/g
const URL_CREDENTIALS = /(\w+:\/\/)[^/\s:@]+:[^/\s@]+@/g

/** The configuration's secrets by value (keepOutOfLogs): no shape finds them. */
const knownSecrets = new Set<string>()

/**
 * A secret of the configuration (OIDC_CLIENT_SECRET): written as [redacted] wherever it appears in
 * a record — a message, a field, a library's error text. Values under 8 characters are not taken
 * (they would blank out ordinary words).
 */
export function keepOutOfLogs(value: string | undefined) {
  if (value !== undefined && value.length >= 8) knownSecrets.add(value)
}

export function scrubString(s: string): string {
  let out = s
    .replace(RAW_KEY, (k) => `${k.slice(0, 12)}…[redacted]`)
    .replace(JWT_SHAPE, '[redacted-jwt]')
    .replace(URL_CREDENTIALS, '$1[redacted]@')
  for (const secret of knownSecrets) if (out.includes(secret)) out = out.replaceAll(secret, '[redacted]')
  return out
}

function scrub(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return scrubString(value)
  if (value === null || typeof value !== 'object' || depth > 4) return value
  if (value instanceof Error) return { name: value.name, message: scrubString(value.message) }
  if (Array.isArray(value)) return value.slice(0, 50).map((v) => scrub(v, depth + 1))
  const out: Fields = {}
  for (const [k, v] of Object.entries(value)) {
    out[k] =
      SECRET_FIELD.test(k) && v !== null && v !== undefined && typeof v !== 'boolean'
        ? '[redacted]'
        : scrub(v, depth + 1)
  }
  return out
}

function write(level: Level, msg: string, fields?: Fields) {
  if (RANK[level] < threshold) return
  const record = {
    ts: new Date().toISOString(),
    level,
    msg: scrubString(msg),
    ...(scrub(fields ?? {}) as Fields),
  }
  sink(JSON.stringify(record))
}

export interface Logger {
  debug(msg: string, fields?: Fields): void
  info(msg: string, fields?: Fields): void
  warn(msg: string, fields?: Fields): void
  error(msg: string, fields?: Fields): void
  child(bound: Fields): Logger
}

function make(bound: Fields): Logger {
  const merge = (f?: Fields) => (f ? { ...bound, ...f } : bound)
  return {
    debug: (m, f) => write('debug', m, merge(f)),
    info: (m, f) => write('info', m, merge(f)),
    warn: (m, f) => write('warn', m, merge(f)),
    error: (m, f) => write('error', m, merge(f)),
    child: (more) => make({ ...bound, ...more }),
  }
}

export const log: Logger = make({})
