import { readFileSync } from 'node:fs'
import { isIP } from 'node:net'
import { rootCertificates } from 'node:tls'

// How the worker daemon and the terminal client reach a server over TLS (docs/deployment.md "TLS
// on the binary"): a lab's private CA given with --ca-file / GRIDKEEP_CA_FILE, trusted beside the
// CAs Bun trusts; and a warning, once, when a key would cross a network in clear text.

/** The PEM of a CA file, checked to hold a certificate; throws an Error naming the file. */
export function readCaFile(path: string): string {
  let pem: string
  try {
    pem = readFileSync(path, 'utf8')
  } catch (e) {
    throw new Error(`cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? e})`)
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new Error(`${path} holds no PEM certificate`)
  return pem
}

/** fetch()'s option trusting `ca` as well as Bun's own CAs (nothing when there is none). */
export const trusting = (ca: string | undefined): { tls?: { ca: string[] } } =>
  ca ? { tls: { ca: [ca, ...rootCertificates] } } : {}

/**
 * Whether a credential sent to `url` crosses a network in clear text: an http:// address whose host
 * is not this machine's loopback. Decided on the address as written (no lookup): `localhost` and
 * `*.localhost` (RFC 6761), 127.0.0.0/8 and ::1 are loopback.
 */
export function sendsInClear(url: string): boolean {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return false
  }
  if (parsed.protocol !== 'http:') return false
  return !isLoopback(parsed.hostname)
}

export function isLoopback(hostname: string): boolean {
  const host = hostname
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase()
  if (host === 'localhost' || host.endsWith('.localhost')) return true
  if (isIP(host) === 4) return host.startsWith('127.')
  // WHATWG URLs write IPv6 in its short form, an IPv4-mapped 127.x as ::ffff:7fXX:…
  if (isIP(host) === 6) return host === '::1' || /^::ffff:7f[0-9a-f]{2}:/.test(host)
  return false
}

/** The warning's words, the same for both programs. */
export const cleartextWarning = (what: string, url: string) =>
  `sending ${what} to ${new URL(url).origin} in clear text (http:// to a host that is not this machine): anyone on the network can read it; use https:// (docs/deployment.md "TLS on the binary")`
