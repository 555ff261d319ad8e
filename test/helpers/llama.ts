import type { Engine } from '../../scripts/llama-server'
import { writeTinyModel } from '../../scripts/llama-server'
import { describeWith, llama, llamaEngine } from './requires'

// The real engine of scripts/llama-server.ts for the tests that need it, as `bun scripts/llama-server.ts
// fetch` left it in its cache (outside the repository; `bun run test:all` fetches it first). Without
// it the suite is skipped by the runner with that reason; with it, every failure is a failure.

/** Registers `body` as a describe block that runs against the engine (skipped when it is absent). */
export function withRealEngine(name: string, body: (engine: Engine) => void) {
  describeWith(llama, name, () => body(llamaEngine as Engine))
}

export const tinyModelPath = () => writeTinyModel()
