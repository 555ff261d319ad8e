import {
  closeSync,
  existsSync,
  openSync,
  readSync,
  renameSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs'

// An engine's output file (docs/worker.md "Engine logs"): `<name>.log`, and `<name>.log.1` before it.
//
// - Always opened for appending (O_APPEND), by the daemon and so by the engine, which inherits the
//   descriptor: every write lands at the file's end as it is then. A file opened without it and
//   truncated under its writer goes on at the old offset, and the gap reads as zero bytes.
// - Bounded by size, as logrotate's copytruncate does (the engine keeps its descriptor, and an
//   engine the daemon adopted after a restart writes through one the daemon never held): past
//   `maxBytes`, its last `maxBytes` (from a line's start) are copied to `.log.1`, and the file is
//   truncated; the engine writes on from its start. `.log.1` never holds more than `maxBytes`; the
//   log itself is back under it at the next check. A line written in the instant between the copy
//   and the truncation is lost.
// - A fresh start keeps the previous run's output as `.log.1`, so the lines a failure quotes are the
//   run's own, and the last run's survive a restart for whoever looks.

/** The size past which an engine's log is rotated: 8 MiB (documented in docs/worker.md). */
export const LOG_MAX_BYTES = 8 * 1024 * 1024
/** How often a running engine's log size is checked. */
export const LOG_CHECK_MS = 10_000
/** How much of a file's end is read for its last lines. */
const TAIL_BYTES = 256 * 1024

export const olderLog = (path: string) => `${path}.1`

/** The descriptor an engine's output goes to (O_APPEND, created owner-only). */
export function openLog(path: string): number {
  return openSync(path, 'a', 0o600)
}

/** Before a fresh start: what the previous run wrote becomes `.log.1`. */
export function beginLog(path: string) {
  try {
    if (statSync(path).size > 0) renameSync(path, olderLog(path))
  } catch {}
}

/** Rotates the log when it is past `maxBytes`; whether it did. Cheap when it is not. */
export function rotateLog(path: string, maxBytes = LOG_MAX_BYTES): boolean {
  let size: number
  try {
    size = statSync(path).size
  } catch {
    return false
  }
  if (size <= maxBytes) return false
  const tmp = `${olderLog(path)}.tmp`
  const fd = openSync(path, 'r')
  try {
    const parts = [readRange(fd, size - maxBytes, size)]
    // What the engine wrote meanwhile goes along, up to the truncation.
    for (let i = 0; i < 3; i++) {
      const now = fstatSize(path)
      if (now <= size) break
      parts.push(readRange(fd, size, now))
      size = now
    }
    truncateSync(path, 0)
    // The last maxBytes of it, from a line's start: .log.1 never holds more, however fast the
    // engine wrote meanwhile.
    const kept = Buffer.concat(parts)
    const last = kept.subarray(Math.max(0, kept.length - maxBytes))
    writeFileSync(tmp, last.subarray(last.indexOf(10) + 1), { mode: 0o600 })
  } finally {
    closeSync(fd)
  }
  renameSync(tmp, olderLog(path))
  return true
}

/**
 * The last `n` lines of the log that `keep` accepts; with `older`, `.log.1` is read too when the log
 * holds fewer (it was rotated during this run).
 */
export function lastLogLines(
  path: string,
  o: { keep?: (line: string) => boolean; n?: number; older?: boolean } = {},
): string[] {
  const n = o.n ?? 12
  const keep = o.keep ?? (() => true)
  const linesOf = (p: string) =>
    tailText(p)
      .split('\n')
      .filter((l) => l.trim() && keep(l))
  let lines = linesOf(path)
  if (lines.length < n && o.older && existsSync(olderLog(path)))
    lines = [...linesOf(olderLog(path)), ...lines]
  return lines.slice(-n)
}

function tailText(path: string): string {
  try {
    const fd = openSync(path, 'r')
    try {
      const size = statSync(path).size
      return readRange(fd, Math.max(0, size - TAIL_BYTES), size).toString('utf8')
    } finally {
      closeSync(fd)
    }
  } catch {
    return ''
  }
}

function readRange(fd: number, from: number, to: number): Buffer {
  const buf = Buffer.alloc(Math.max(0, to - from))
  const read = readSync(fd, buf, 0, buf.length, from)
  return buf.subarray(0, read)
}

function fstatSize(path: string): number {
  try {
    return statSync(path).size
  } catch {
    return 0
  }
}
