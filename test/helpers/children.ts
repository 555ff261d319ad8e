import type { Subprocess } from 'bun'

// What a test file starts outside its own process (a server process, a real engine) and must not
// outlive the run: `bun test` runs no process 'exit' handler, so a test that fails before its own
// cleanup would leave it running. test/setup.ts's last afterAll stops whatever is left here.

interface Child {
  running(): boolean
  stop(): unknown
}

const children = new Set<Child>()

/** Registers a subprocess; stopped (SIGKILL) at the end of the run if it is still running. */
export function ownProcess<P extends Subprocess>(proc: P): P {
  children.add({
    running: () => proc.exitCode === null && proc.signalCode === null,
    stop: () => proc.kill('SIGKILL'),
  })
  return proc
}

/** Registers anything whose hard stop does nothing once it has ended (a real llama-server). */
export function ownChild<C extends { stop(hard?: boolean): unknown }>(child: C): C {
  children.add({ running: () => true, stop: () => child.stop(true) })
  return child
}

/** Stops every registered child still running (test/setup.ts, once, after every test). */
export async function stopOwnChildren() {
  const left = [...children].filter((c) => c.running())
  children.clear()
  await Promise.all(left.map((c) => c.stop()))
}
