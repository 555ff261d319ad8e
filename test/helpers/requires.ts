import { describe, test } from 'bun:test'
import { existsSync } from 'node:fs'
import { cachedEngine, type Engine } from '../../scripts/llama-server'
import { POSTGRES_FIX, postgresBinDir } from '../../scripts/postgres'

// What some tests need beyond the test process: PostgreSQL's server binaries, Chromium, the real
// llama.cpp engine. Plain `bun test` (the inner loop) runs without them: a suite that needs a
// missing one is skipped by the runner, with the reason and the command that brings it in its
// name. `bun run test:all` (scripts/test-all.ts) brings all three first and sets GK_TEST_ALL=1:
// then nothing is skipped for want of them, so a gap fails instead of passing unseen.

export interface Need {
  /** What it is, for the skip line. */
  what: string
  ok: boolean
  /** The command that brings it. */
  fix: string
}

const all = process.env.GK_TEST_ALL === '1'

export const postgres: Need = {
  what: 'PostgreSQL server binaries',
  ok: !!process.env.GRIDKEEP_TEST_POSTGRES_URL || postgresBinDir() !== null,
  fix: POSTGRES_FIX,
}

/** Debian's chromium-headless-shell, which the browser tests drive (test/helpers/browser.ts). */
export const CHROMIUM = process.env.GK_CHROMIUM ?? '/usr/bin/chromium-headless-shell'

export const chromium: Need = {
  what: `Chromium (${CHROMIUM})`,
  ok: existsSync(CHROMIUM),
  fix: 'apt-get install -y --no-install-recommends chromium-headless-shell',
}

/** The real engine, only as a previous fetch left it in the cache: the inner loop fetches nothing. */
export const llamaEngine: Engine | null = cachedEngine()

export const llama: Need = {
  what: 'llama-server',
  ok: llamaEngine !== null,
  fix: 'bun scripts/llama-server.ts fetch',
}

/** The suite's name, with why it is skipped when something it needs is missing. */
function named(name: string, needs: Need[]): string {
  const missing = needs.filter((n) => !n.ok)
  if (missing.length === 0) return name
  return `${name} (skipped: ${missing.map((n) => `no ${n.what}; ${n.fix}`).join('; ')})`
}

const skipped = (needs: Need[]) => !all && needs.some((n) => !n.ok)

/** `describe`, skipped with its reason unless every need is met (never under GK_TEST_ALL=1). */
export function describeWith(needs: Need | Need[], name: string, body: () => void) {
  const list = Array.isArray(needs) ? needs : [needs]
  describe.skipIf(skipped(list))(named(name, list), body)
}

/** `test`, skipped with its reason unless every need is met (never under GK_TEST_ALL=1). */
export function testWith(needs: Need | Need[], name: string, body: () => unknown, timeout?: number) {
  const list = Array.isArray(needs) ? needs : [needs]
  test.skipIf(skipped(list))(named(name, list), body as () => void, timeout)
}
