// Every secret the suite sees (passwords, JWTs, raw keys, reset tokens) is remembered here, and
// every log line the server writes during the suite is kept, with whatever else the processes the
// tests start print (a daemon's plain-text warnings). test/setup.ts checks at the end that no secret
// ever appeared in any of it (docs/api.md §0: secrets never reach logs).

const secrets = new Set<string>()
/** The JSON log records (src/lib/logger.ts), which tests read back. */
const lines: string[] = []
/** Other output, kept only for the secret scan. */
const other: string[] = []

export function rememberSecret(value: unknown) {
  if (typeof value === 'string' && value.length >= 8) secrets.add(value)
}

export function captureLogLine(line: string) {
  if (line.startsWith('{')) lines.push(line)
  else other.push(line)
}

export const capturedLogLines = () => lines

const SECRET_FIELDS = new Set([
  'password',
  'new_password',
  'current_password',
  'token',
  'access_token',
  'key',
  'secret',
])

/** Remembers secret-bearing fields of a request or response body. */
export function rememberSecretsIn(body: unknown, depth = 0) {
  if (!body || typeof body !== 'object' || depth > 3) return
  for (const [k, v] of Object.entries(body)) {
    if (SECRET_FIELDS.has(k)) rememberSecret(v)
    else if (typeof v === 'object') rememberSecretsIn(v, depth + 1)
  }
}

/** The secrets found in the captured log output. Tokenised so the check is linear in log size. */
export function leakedSecrets(extraLines: string[] = []): string[] {
  const words = new Set<string>()
  for (const line of [...lines, ...other, ...extraLines])
    for (const w of line.split(/[^A-Za-z0-9._~+/-]+/)) if (w) words.add(w)
  const text = lines.length + other.length < 2000 ? [...lines, ...other].join('\n') : ''
  return [...secrets].filter((s) => words.has(s) || text?.includes(s))
}

export const secretCount = () => secrets.size
