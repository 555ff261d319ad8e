import { describe, test } from 'bun:test'
import { type Engine, fetchEngine, writeTinyModel } from '../../scripts/llama-server'

// The real engine of scripts/llama-server.ts for the tests that need it. Fetched once per machine
// (cached outside the repository). When it cannot be fetched, each suite that needs it registers
// one test that prints `NOT RUN: <suite>: <reason>`, which .ci/run counts and shows in its summary;
// when it is fetched, every failure is a failure.

export const engine = fetchEngine()

/** Registers `body` as a describe block when the engine is here, else one "not run" test. */
export function withRealEngine(name: string, body: (engine: Engine) => void) {
  if (engine.ok) {
    const e = engine.engine
    describe(name, () => body(e))
    return
  }
  const reason = engine.reason
  test(`${name} (not run: llama-server unavailable)`, () => {
    console.log(`NOT RUN: ${name}: ${reason}`)
  })
}

export const tinyModelPath = () => writeTinyModel()
