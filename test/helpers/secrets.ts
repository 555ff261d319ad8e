// Every secret the suite sees (passwords, JWTs, raw keys, reset tokens) is remembered here, and
// every log line the server writes during the suite is kept. test/setup.ts checks at the end that
// no secret ever appeared in the logs (issue 2 and 6: secrets never reach logs).

const secrets = new Set<string>()
const lines: string[] = []

export function rememberSecret(value: unknown) {
  if (typeof value === 'string' && value.length >= 8) secrets.add(value)
}

export function captureLogLine(line: string) {
  lines.push(line)
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
  for (const line of [...lines, ...extraLines])
    for (const w of line.split(/[^A-Za-z0-9._~+/-]+/)) if (w) words.add(w)
  const text = lines.length < 2000 ? lines.join('\n') : ''
  return [...secrets].filter((s) => words.has(s) || text?.includes(s))
}

export const secretCount = () => secrets.size
