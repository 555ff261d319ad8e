import { BlockList, isIP } from 'node:net'
import type { ResolveHost } from '../../deps'
import { badRequest } from '../../lib/errors'

// docs/api.md §13 URL rules: http(s) only, at most 2,048 characters, and no host that resolves to an
// address inside the server's own network (SSRF): loopback, link-local, private and unique-local,
// cloud metadata (169.254.169.254 is link-local, fd00:ec2::254 unique-local), and the addresses
// that reach this machine or nothing (0.0.0.0/8, ::, multicast, reserved). WEBHOOK_ALLOW_PRIVATE
// lifts the address rule (a LAN receiver, tests). Checked at creation and again at each delivery
// after resolution, and the delivery connects to the address checked (DNS rebinding).

export const MAX_URL_LENGTH = 2048

const refused = new BlockList()
for (const [net, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4], // multicast, then reserved and broadcast
  ['240.0.0.0', 4],
] as const)
  refused.addSubnet(net, bits, 'ipv4')
for (const [net, bits] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const)
  refused.addSubnet(net, bits, 'ipv6')

/** Whether delivering to `address` (an IP literal) would reach a refused range. */
export function isRefusedAddress(address: string): boolean {
  const family = isIP(address)
  if (family === 0) return true
  // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) reach the embedded IPv4 address.
  const embedded = /^(?:::ffff:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1]
  if (embedded) return isRefusedAddress(embedded)
  // BlockList checks IPv4-mapped addresses in hexadecimal form against the IPv4 ranges itself.
  return refused.check(address, family === 4 ? 'ipv4' : 'ipv6')
}

/** The URL's host without IPv6 brackets. */
export const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, '$1')

/** POST /v1/webhooks: the URL's form (400 invalid_url). */
export function parseWebhookUrl(raw: string): URL {
  const invalid = (why: string) => badRequest('invalid_url', `Invalid webhook url: ${why}`, 'url')
  if (raw.length > MAX_URL_LENGTH) throw invalid(`longer than ${MAX_URL_LENGTH} characters`)
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw invalid('not an absolute URL')
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('only http and https are allowed')
  if (!url.hostname) throw invalid('no host')
  return url
}

/** refused: an address rule said no; otherwise the host could not be resolved (a failed attempt). */
export type Target = { ok: true; address: string } | { ok: false; refused: boolean; reason: string }

/**
 * The address to connect to for `url`: its host resolved (an IP literal is its own address) and
 * every address checked, so a name that also resolves to a refused range is refused. With
 * `allowPrivate` only resolution is needed.
 */
export async function resolveTarget(url: URL, resolve: ResolveHost, allowPrivate: boolean): Promise<Target> {
  const host = hostOf(url)
  let addresses: string[]
  try {
    addresses = isIP(host) ? [host] : await resolve(host)
  } catch (e) {
    return {
      ok: false,
      refused: false,
      reason: `cannot resolve ${host}: ${e instanceof Error ? e.message : String(e)}`,
    }
  }
  if (addresses.length === 0) return { ok: false, refused: false, reason: `cannot resolve ${host}` }
  if (!allowPrivate) {
    const bad = addresses.find(isRefusedAddress)
    if (bad)
      return {
        ok: false,
        refused: true,
        reason: `${host} resolves to ${bad}, a refused address (WEBHOOK_ALLOW_PRIVATE)`,
      }
  }
  // IPv4 first, as a receiver on "localhost" most often listens on 127.0.0.1 only.
  return { ok: true, address: addresses.find((a) => isIP(a) === 4) ?? addresses[0]! }
}
