import type { Clock } from './clock'
import { rateLimited } from './errors'
import { log } from './logger'

/** Keys one rule tracks at most: about 18 MB at one hit a key (bench/rate-limit.ts), 8 bytes more a hit. */
const DEFAULT_MAX_KEYS = 100_000

/**
 * Sliding-window counters in memory (one process serves the whole lab). `take` throws the 429
 * AppError with Retry-After when `key` has used up `limit` hits of `rule` in the last
 * `windowSeconds`. A limit of 0 turns the rule off (docs/api.md §3).
 *
 * Memory and cost are bounded whatever clients send (e.g. cycling emails on forgot-password):
 * - Each rule has its own table: its keys in a list ordered by last hit. A rule has one window, so
 *   that is also the order in which keys expire: a hit first forgets the expired keys at the head
 *   (amortized O(1) per hit, no scan) and moves its key to the tail (O(1)); a key holds at most
 *   `limit` timestamps.
 * - A table holds at most `maxKeys` keys. When it is full of keys still inside their window, a new
 *   key is refused with a 429 whose Retry-After is when the oldest key expires. Nothing is evicted
 *   early, so a limited client stays limited however many others flood the rule; the cost of a
 *   flood falls on newcomers to that rule only, never on other rules.
 */
export class RateLimiter {
  private tables = new Map<string, Table>()
  private readonly maxKeys: number

  constructor(
    private clock: Clock,
    opts: { maxKeys?: number } = {},
  ) {
    this.maxKeys = opts.maxKeys ?? DEFAULT_MAX_KEYS
  }

  take(rule: string, key: string, limit: number, windowSeconds: number): void {
    if (limit <= 0) return
    const now = this.clock.nowMs()
    const windowMs = windowSeconds * 1000
    const since = now - windowMs
    let table = this.tables.get(rule)
    if (!table) {
      table = new Table()
      this.tables.set(rule, table)
    }
    table.forgetUntil(since)
    const entry = table.byKey.get(key)
    if (!entry) {
      if (table.byKey.size >= this.maxKeys) {
        if (!table.full) {
          table.full = true
          log.warn('rate limit table full: new clients of this rule wait', { rule, max_keys: this.maxKeys })
        }
        throw rateLimited(retryAfter(table.head!.lastHit + windowMs - now))
      }
      table.full = false
      table.append({ key, hits: [now], lastHit: now, prev: null, next: null })
      return
    }
    const hits = entry.hits
    let expired = 0
    while (expired < hits.length && hits[expired]! <= since) expired++
    if (expired > 0) hits.splice(0, expired)
    if (hits.length >= limit) throw rateLimited(retryAfter(hits[0]! + windowMs - now))
    hits.push(now)
    entry.lastHit = now
    table.moveToTail(entry)
  }

  /** Keys tracked across every rule (what the limiter's memory grows with). */
  trackedKeys(): number {
    let n = 0
    for (const table of this.tables.values()) n += table.byKey.size
    return n
  }
}

interface Entry {
  key: string
  /** Hit times in ms, oldest first; at most the rule's limit. */
  hits: number[]
  lastHit: number
  prev: Entry | null
  next: Entry | null
}

/**
 * One rule's keys: a Map for lookup and a doubly linked list in order of last hit. (A Map's own
 * insertion order would do, but iterating it from the front walks over the holes its deletes leave.)
 */
class Table {
  byKey = new Map<string, Entry>()
  head: Entry | null = null
  tail: Entry | null = null
  /** Refusing new keys; kept so the warning is logged once per episode, not once per request. */
  full = false

  /** Forgets the keys whose last hit is at or before `since`: none of their hits count any more. */
  forgetUntil(since: number) {
    while (this.head && this.head.lastHit <= since) {
      this.byKey.delete(this.head.key)
      this.unlink(this.head)
    }
  }

  append(entry: Entry) {
    this.byKey.set(entry.key, entry)
    this.link(entry)
  }

  moveToTail(entry: Entry) {
    if (this.tail === entry) return
    this.unlink(entry)
    this.link(entry)
  }

  private link(entry: Entry) {
    entry.prev = this.tail
    entry.next = null
    if (this.tail) this.tail.next = entry
    else this.head = entry
    this.tail = entry
  }

  private unlink(entry: Entry) {
    if (entry.prev) entry.prev.next = entry.next
    else this.head = entry.next
    if (entry.next) entry.next.prev = entry.prev
    else this.tail = entry.prev
    entry.prev = entry.next = null
  }
}

const retryAfter = (ms: number) => Math.max(1, Math.ceil(ms / 1000))
