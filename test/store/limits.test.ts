import { afterEach, expect, test } from 'bun:test'
import { describeWith, postgres } from '../helpers/requires'
import { clock, describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// Rate-limit counters behave the same on both engines (docs/api.md §3, §12).

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} limits`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('a sliding window per rule and key; Retry-After until the oldest hit leaves it; 0 = off', async () => {
      h = await open()
      const take = (key = 'a@x', rule = 'login') => h.store.limits.take(rule, key, 3, 60)
      for (let i = 0; i < 3; i++) {
        await take()
        clock.advance(10)
      }
      // Hits at t, t+10, t+20; now t+30: the first leaves the window at t+60.
      await expect(take()).rejects.toMatchObject({ status: 429, headers: { 'retry-after': '30' } })
      await take('b@x') // another key
      await take('a@x', 'forgot') // another rule
      clock.advance(30)
      await take() // t+60: the first hit has left the window
      await expect(take()).rejects.toMatchObject({ status: 429 })
      for (let i = 0; i < 10; i++) await h.store.limits.take('keys', 'u', 0, 60)
    })
  })
}

describeWith(postgres, 'postgres limits are shared by every instance', () => {
  test('two stores on one database count together, also when they race', async () => {
    const [, open] = storeEngines.find(([kind]) => kind === 'postgres')!
    const h = await open()
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 12 }, () => h.store.limits.take('race', 'same-key', 5, 60)),
      )
      expect(results.filter((r) => r.status === 'fulfilled').length).toBe(5)
      // Expired hits are forgotten as the rule is used: the table stays bounded.
      clock.advance(61)
      await h.store.limits.take('race', 'other-key', 5, 60)
      expect(
        (await h.one<{ n: number }>('SELECT CAST(count(*) AS INTEGER) AS n FROM rate_limit_hits')).n,
      ).toBe(1)
    } finally {
      await h.close()
    }
  })
})
