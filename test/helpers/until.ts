// The one way a test waits for something that happens on its own (a background loop, another
// process, a page updating itself): ask again until it holds, never sleep for a guessed time.

/**
 * Resolves with the first truthy value `probe` returns. A probe that throws (an `expect` not met
 * yet) counts as "not yet". After `ms` it fails with the probe's last error, else with
 * `timed out waiting for <what>`.
 */
export async function until<T>(
  what: string,
  probe: () => T | Promise<T>,
  ms = 20_000,
): Promise<Exclude<T, false | null | undefined | 0 | ''>> {
  const deadline = performance.now() + ms
  for (;;) {
    let error: unknown
    try {
      const value = await probe()
      if (value) return value as Exclude<T, false | null | undefined | 0 | ''>
    } catch (e) {
      error = e
    }
    if (performance.now() > deadline) throw error ?? new Error(`timed out waiting for ${what}`)
    await Bun.sleep(10)
  }
}

/** Runs `check` (assertions) until it passes; its last failure is the test's failure. */
export async function eventually<T>(check: () => T | Promise<T>, ms = 15_000): Promise<T> {
  let result!: T
  await until(
    'the condition',
    async () => {
      result = await check()
      return true
    },
    ms,
  )
  return result
}
