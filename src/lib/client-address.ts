import { BlockList, isIP } from 'node:net'

// Who a request comes from (docs/deployment.md "The client's address behind a proxy"): the
// connection's peer, unless that peer is a reverse proxy the server trusts (TRUSTED_PROXIES), in
// which case the client is read from X-Forwarded-For. Each proxy appends the address it received the request from,
// so the list reads client, proxy 1, proxy 2 …; only the entries the trusted proxies appended can be
// believed, and everything to their left may be whatever the client sent. The client is therefore
// the rightmost entry that is not itself a trusted proxy (the algorithm of nginx's
// real_ip_recursive, Express's proxy-addr and MDN's X-Forwarded-For page).

/** A list of addresses and CIDR ranges, checked once at start (config.ts TRUSTED_PROXIES). */
export class TrustedProxies {
  private constructor(
    private readonly list: BlockList,
    /** How many items the setting named: none trusts no peer at all. */
    readonly size: number,
  ) {}

  static readonly none = new TrustedProxies(new BlockList(), 0)

  /**
   * A comma-separated list of addresses (`10.0.0.2`, `::1`) and CIDR ranges (`10.0.0.0/8`,
   * `fd00::/8`). Throws an Error naming the first item that is neither.
   */
  static parse(setting: string | undefined): TrustedProxies {
    const items = (setting ?? '')
      .split(',')
      .map((item) => item.trim())
      .filter(Boolean)
    if (items.length === 0) return TrustedProxies.none
    const list = new BlockList()
    for (const item of items) {
      const slash = item.indexOf('/')
      const address = slash < 0 ? item : item.slice(0, slash)
      const family = isIP(address)
      const bits = slash < 0 ? null : item.slice(slash + 1)
      const max = family === 4 ? 32 : 128
      if (family === 0 || (bits !== null && !/^\d{1,3}$/.test(bits)) || Number(bits) > max)
        throw new Error(
          `expected IP addresses or CIDR ranges separated by commas (got ${JSON.stringify(item)})`,
        )
      const type = family === 4 ? 'ipv4' : 'ipv6'
      if (bits === null) list.addAddress(address, type)
      else list.addSubnet(address, Number(bits), type)
    }
    return new TrustedProxies(list, items.length)
  }

  /** Whether `address` (an IP literal; IPv4-mapped IPv6 counts as its IPv4) is a trusted proxy. */
  has(address: string): boolean {
    const family = isIP(address)
    if (family === 0 || this.size === 0) return false
    return this.list.check(address, family === 4 ? 'ipv4' : 'ipv6')
  }

  /**
   * The client's address: `peer` itself unless it is trusted; then the rightmost entry of
   * `forwardedFor` that is not trusted (the leftmost when every entry is). An entry that is no
   * IP address, met before the client is found, makes the header unusable: the answer is the peer.
   */
  clientAddress(peer: string | null, forwardedFor: string | null): string | null {
    if (peer === null || forwardedFor === null || !this.has(peer)) return peer
    const hops = forwardedFor.split(',')
    let client: string | null = null
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hopAddress(hops[i]!)
      if (hop === null) return peer
      client = hop
      if (!this.has(hop)) break
    }
    return client ?? peer
  }
}

const WITH_PORT = /^(?:\[([0-9A-Fa-f:.]+)\]|(\d{1,3}(?:\.\d{1,3}){3})):(\d{1,5})$/

/** One X-Forwarded-For entry as an address: an IP literal, or one with a port (`1.2.3.4:5678`, `[::1]:80`). */
function hopAddress(entry: string): string | null {
  const hop = entry.trim()
  if (isIP(hop) !== 0) return hop
  const m = WITH_PORT.exec(hop)
  const address = m?.[1] ?? m?.[2]
  return address !== undefined && isIP(address) !== 0 && Number(m![3]) <= 65535 ? address : null
}
