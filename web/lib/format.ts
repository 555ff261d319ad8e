// How numbers, sizes and times read on the dashboard.

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB']

/** 1536 → "1.5 KB" (powers of 1024, one decimal below 10). */
export function formatBytes(bytes: number): string {
  let value = bytes
  let unit = 0
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024
    unit++
  }
  const digits = unit === 0 || value >= 10 ? 0 : 1
  return `${value.toFixed(digits)} ${UNITS[unit]}`
}

/** Unix seconds → "2026-11-23 11:22" in the viewer's time zone; null → "—". */
export function formatTime(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return '—'
  const d = new Date(seconds * 1000)
  const pad = (n: number) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`
}

/** How long ago, coarse: "just now", "42 s ago", "5 min ago", "3 h ago", "2 d ago"; null → "never". */
export function formatAgo(seconds: number | null | undefined, now: number): string {
  if (seconds === null || seconds === undefined) return 'never'
  const delta = Math.max(0, Math.round(now - seconds))
  if (delta < 5) return 'just now'
  if (delta < 60) return `${delta} s ago`
  if (delta < 3600) return `${Math.floor(delta / 60)} min ago`
  if (delta < 86400) return `${Math.floor(delta / 3600)} h ago`
  return `${Math.floor(delta / 86400)} d ago`
}

/** VRAM used of total, in GB: "13.5 / 24 GB"; unknown → "—". */
export function formatVram(total: number | null, available: number | null): string {
  if (total === null || total === undefined) return '—'
  const used = available === null || available === undefined ? null : Math.max(0, total - available)
  const gb = (n: number) => String(Math.round(n * 10) / 10)
  return used === null ? `? / ${gb(total)} GB` : `${gb(used)} / ${gb(total)} GB`
}

/** 0..1 share of VRAM in use, for the bar; null when unknown. */
export function vramShare(total: number | null, available: number | null): number | null {
  if (!total || available === null || available === undefined) return null
  return Math.min(1, Math.max(0, (total - available) / total))
}

/**
 * Where a worker's model stands (docs/api.md §7 "Worker row" `models[].state`), in words: "loaded",
 * "on disk", "downloading 30 %" (with the bytes of the download when known).
 */
export function formatModelState(m: {
  state: string
  progress: { completed_bytes: number | null; total_bytes: number | null } | null
}): string {
  const words = m.state.replaceAll('_', ' ')
  const total = m.progress?.total_bytes
  if (m.state !== 'downloading' || !total) return words
  const share = Math.floor(((m.progress?.completed_bytes ?? 0) / total) * 100)
  return `${words} ${Math.min(100, share)} %`
}

/** "1,234" with thousands separators, whatever the viewer's locale. */
export const formatCount = (n: number): string => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',')

/** "76 % (128 of 167)": the share `part` is of `whole`, rounded down; "—" when the whole is 0. */
export function formatShare(part: number, whole: number): string {
  if (!(whole > 0)) return '—'
  return `${Math.floor((part * 100) / whole)} % (${formatCount(part)} of ${formatCount(whole)})`
}

/** Rows as CSV (RFC 4180): a cell holding a comma, a quote or a line break is quoted, quotes doubled. */
export function toCsv(rows: (string | number)[][]): string {
  const cell = (v: string | number) => {
    const text = String(v)
    return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text
  }
  return rows.map((row) => row.map(cell).join(',')).join('\n') + '\n'
}
