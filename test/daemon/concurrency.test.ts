import { describe, expect, test } from 'bun:test'
import { AUTO_START, ConcurrencyController } from '../../src/daemon/concurrency'

// The decisions of --concurrency auto (src/daemon/concurrency.ts), on a simulated engine and a
// simulated clock: nothing sleeps, and the same samples give the same decisions.

interface EngineModel {
  slots: number
  latencyMs: number
  /** Answers 429 (at once) to a request arriving while more than this many are in flight. */
  refuseAbove?: number
}

/**
 * A daemon with endless work against an engine of fixed slots: it keeps `limit` requests in flight;
 * the engine serves `slots` at a time, `latencyMs` each, and queues the rest (llama-server).
 * Returns the limit after each simulated millisecond step where it changed.
 */
function simulate(c: ConcurrencyController, clock: { t: number }, engine: EngineModel, untilMs: number) {
  let running: { started: number; ends: number }[] = []
  const queued: number[] = []
  const refused: number[] = []
  let inFlight = 0
  const limits: { t: number; limit: number }[] = [{ t: clock.t, limit: c.limit }]
  let arrivals = 0
  let arrivalsWithin = 0
  while (clock.t < untilMs) {
    while (inFlight < c.limit) {
      inFlight++
      c.inFlightNow(inFlight)
      arrivals++
      if (engine.refuseAbove !== undefined && inFlight > engine.refuseAbove) refused.push(clock.t)
      else {
        if (engine.refuseAbove === undefined || inFlight <= engine.refuseAbove) arrivalsWithin++
        if (running.length < engine.slots)
          running.push({ started: clock.t, ends: clock.t + engine.latencyMs })
        else queued.push(clock.t)
      }
    }
    clock.t++
    for (const started of refused.splice(0)) {
      inFlight--
      c.inFlightNow(inFlight)
      c.sample({ startedAtMs: started, overload: true })
    }
    const done = running.filter((r) => r.ends <= clock.t)
    running = running.filter((r) => r.ends > clock.t)
    for (const r of done) {
      inFlight--
      c.inFlightNow(inFlight)
      c.sample({ startedAtMs: r.started, overload: false })
      const next = queued.shift()
      if (next !== undefined) running.push({ started: next, ends: clock.t + engine.latencyMs })
    }
    if (c.limit !== limits.at(-1)!.limit) limits.push({ t: clock.t, limit: c.limit })
  }
  return { limits, arrivals, arrivalsWithin }
}

function controller(o: { setting?: number | 'auto'; max?: number } = {}) {
  const clock = { t: 0 }
  const changes: { limit: number; was: number; reason: string }[] = []
  const c = new ConcurrencyController({
    setting: o.setting ?? 'auto',
    max: o.max ?? 256,
    nowMs: () => clock.t,
    onChange: (limit, was, reason) => changes.push({ limit, was, reason }),
  })
  return { c, clock, changes }
}

/** Share of the simulated time spent at a limit within [lo, hi]. */
function shareWithin(limits: { t: number; limit: number }[], end: number, lo: number, hi: number) {
  let inside = 0
  for (let i = 0; i < limits.length; i++) {
    const until = limits[i + 1]?.t ?? end
    if (limits[i]!.limit >= lo && limits[i]!.limit <= hi) inside += until - limits[i]!.t
  }
  return inside / (end - limits[0]!.t)
}

describe('--concurrency auto', () => {
  test('starts small and rises while throughput rises, up to the engine’s slots', () => {
    const { c, clock, changes } = controller()
    expect(c.limit).toBe(AUTO_START)
    const { limits } = simulate(c, clock, { slots: 64, latencyMs: 40 }, 10_000)
    // Slow start doubles while each doubling pays.
    expect(limits.slice(0, 4).map((l) => l.limit)).toEqual([8, 16, 32, 64])
    expect(changes[0]!.reason).toContain('throughput rises')
    expect(c.limit).toBeGreaterThanOrEqual(64)
    expect(c.limit).toBeLessThanOrEqual(80)
    // Settled: most of the last 5 s near the slots.
    const late = limits.filter((l) => l.t >= 5_000)
    const at5 = limits.filter((l) => l.t < 5_000).at(-1)!
    expect(shareWithin([{ t: 5_000, limit: at5.limit }, ...late], 10_000, 64, 80)).toBeGreaterThan(0.9)
  })

  test('a plateau stops the rise: a raise that brings no throughput and more latency is undone', () => {
    const { c, clock, changes } = controller()
    simulate(c, clock, { slots: 40, latencyMs: 50 }, 10_000)
    const undo = changes.find((ch) => ch.reason.includes('only queued'))
    expect(undo).toBeDefined()
    expect(undo!.limit).toBeLessThan(undo!.was)
    // 8 → 16 → 32 → 64 (flat) → back to 32; then small probes from there.
    expect(changes.slice(0, 4).map((ch) => ch.limit)).toEqual([16, 32, 64, 32])
    expect(Math.max(...changes.map((ch) => ch.limit))).toBe(64)
    expect(c.limit).toBeGreaterThanOrEqual(36)
    expect(c.limit).toBeLessThanOrEqual(48)
  })

  test('backs off multiplicatively on 429 and stays at or under the engine’s bound most of the time', () => {
    const { c, clock, changes } = controller()
    const { limits, arrivals, arrivalsWithin } = simulate(
      c,
      clock,
      { slots: 64, latencyMs: 40, refuseAbove: 20 },
      20_000,
    )
    const cuts = changes.filter((ch) => ch.reason.includes('overloaded'))
    expect(cuts.length).toBeGreaterThan(0)
    for (const cut of cuts) expect(cut.limit).toBe(Math.floor(cut.was * 0.75))
    expect(shareWithin(limits, 20_000, 1, 21)).toBeGreaterThan(0.8)
    expect(arrivalsWithin / arrivals).toBeGreaterThan(0.9)
  })

  test('one cut per round: overload answers to requests sent before the cut are not news', () => {
    const { c, clock, changes } = controller()
    clock.t = 100
    for (let i = 0; i < 6; i++) c.sample({ startedAtMs: 50 + i, overload: true })
    expect(changes).toEqual([
      { limit: 6, was: 8, reason: 'the engine is overloaded (429, 503 or a timeout)' },
    ])
    // A request sent after the cut that is refused (or times out) cuts again.
    clock.t = 200
    c.sample({ startedAtMs: 150, overload: true })
    expect(c.limit).toBe(4)
  })

  test('latency that grows without throughput while holding steps the limit down', () => {
    const { c, clock, changes } = controller()
    simulate(c, clock, { slots: 32, latencyMs: 40 }, 5_000)
    const settled = c.limit
    // The engine gets twice as slow (another tenant): same slots, double latency, less throughput.
    simulate(c, clock, { slots: 32, latencyMs: 80 }, 8_000)
    const drift = changes.find((ch) => ch.reason === 'latency grows without throughput')
    expect(drift).toBeDefined()
    expect(drift!.limit).toBeLessThan(drift!.was)
    expect(settled).toBeGreaterThanOrEqual(32)
  })

  test('--max-concurrency caps it', () => {
    const { c, clock } = controller({ max: 24 })
    const { limits } = simulate(c, clock, { slots: 64, latencyMs: 40 }, 5_000)
    expect(Math.max(...limits.map((l) => l.limit))).toBe(24)
    expect(c.limit).toBe(24)
  })

  test('windows that do not fill the limit (nothing more to run) change nothing', () => {
    const { c, clock, changes } = controller()
    // Two requests in flight, answered every 10 ms, for ten seconds.
    c.inFlightNow(2)
    for (clock.t = 10; clock.t <= 10_000; clock.t += 10) {
      c.sample({ startedAtMs: clock.t - 10, overload: false })
      c.sample({ startedAtMs: clock.t - 10, overload: false })
    }
    expect(changes).toEqual([])
    expect(c.limit).toBe(AUTO_START)
  })

  test('the engine’s reported slots set the start until measuring has begun', () => {
    const { c, clock } = controller()
    c.engineReports(64)
    expect(c.limit).toBe(64)
    simulate(c, clock, { slots: 64, latencyMs: 40 }, 2_000)
    const after = c.limit
    c.engineReports(4)
    expect(c.limit).toBe(after)
    // No slow start past reported slots: at most small steps above them.
    expect(after).toBeLessThanOrEqual(72)
  })
})

describe('--concurrency N', () => {
  test('a pinned number never moves: not on overload, not on rising throughput, not on engine figures', () => {
    const { c, clock, changes } = controller({ setting: 12 })
    c.engineReports(64)
    simulate(c, clock, { slots: 64, latencyMs: 40 }, 3_000)
    simulate(c, clock, { slots: 64, latencyMs: 40, refuseAbove: 4 }, 6_000)
    expect(c.limit).toBe(12)
    expect(changes).toEqual([])
  })

  test('a pinned number above --max-concurrency is capped', () => {
    expect(controller({ setting: 500, max: 256 }).c.limit).toBe(256)
  })
})
