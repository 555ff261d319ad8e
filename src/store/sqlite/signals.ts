import type { SignalsStore } from '../signals'

/** One process: nobody else to tell (src/store/signals.ts). */
export const sqliteSignals = (): SignalsStore => ({
  async publish() {},
  async subscribe() {
    return async () => {}
  },
})
