// A proxy between a daemon and the real control plane that can hold chosen requests until the test
// lets them through: how a test makes "job A is still on the worker while job B runs" or "the
// worker has not heartbeated yet" happen at a moment it picks, with nothing about the server or
// the daemon faked. Everything else passes straight through, bodies streamed.

export interface GateProxy {
  url: string
  /** Holds every request from now on whose method and path match, under `name`. */
  hold(name: string, match: (method: string, path: string) => boolean): void
  /** Lets `name`'s held requests through and stops holding them. */
  release(name: string): void
  /** How many requests `name` holds now. */
  waiting(name: string): number
  stop(): Promise<void>
}

export function startGateProxy(target: string): GateProxy {
  const gates = new Map<
    string,
    { match: (method: string, path: string) => boolean; waiting: Set<() => void> }
  >()
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url)
      for (const gate of gates.values()) {
        if (!gate.match(req.method, url.pathname)) continue
        await new Promise<void>((resolve) => gate.waiting.add(resolve))
      }
      const headers = new Headers(req.headers)
      headers.delete('host')
      return fetch(target + url.pathname + url.search, {
        method: req.method,
        headers,
        body: req.body,
        redirect: 'manual',
        duplex: 'half',
      })
    },
  })
  return {
    url: `http://127.0.0.1:${server.port}`,
    hold(name, match) {
      gates.set(name, { match, waiting: new Set() })
    },
    release(name) {
      const gate = gates.get(name)
      gates.delete(name)
      for (const go of gate?.waiting ?? []) go()
    },
    waiting: (name) => gates.get(name)?.waiting.size ?? 0,
    async stop() {
      for (const name of [...gates.keys()]) this.release(name)
      await server.stop(true)
    },
  }
}
