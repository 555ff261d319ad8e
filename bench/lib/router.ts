// A stand-in for llama.cpp's router (llama-server without a model; src/daemon/engines/llama-router.ts
// is the daemon's side) that serves ONE model at a time, for bench/placement.ts: what the managed
// daemon attaches to with `--runtime llama.cpp --runtime-url <this>`.
//
//   GET  /models                  {data: [{id, status: {value: unloaded | loading | loaded, args}}]}
//                                 (args: `--model <path>`, so the daemon hashes the file it names)
//   POST /models/load {model}     answers at once; the model is `loading` for `loadMs`, then
//                                 `loaded`. Loading a model unloads the one loaded (one at a time).
//   POST /models/unload {model}   400 "model is not running" unless it is loaded or loading
//   GET  /props?model=            {total_slots}
//   POST /v1/chat/completions     for the loaded model only (400 otherwise); `slots` requests at
//                                 once, `latencyMs` each, the rest wait in a queue as llama-server's do
//
// It counts the loads it performed and tells `onRequest` of each inference request.

export interface RouterOptions {
  /** Model id (a GGUF's file stem) → its file. */
  models: Record<string, string>
  slots: number
  latencyMs: number
  loadMs: number
  onRequest?: (model: string, body: any) => void
}

export interface Router {
  url: string
  /** Loads begun (each one ends loaded unless another load or an unload cut it short). */
  loads: number
  /** Each load begun: when (performance.now()) and which model. */
  history: { ms: number; model: string }[]
  /** The model loaded now. */
  loaded(): string | null
  stop(): Promise<void>
}

const error = (status: number, message: string) =>
  Response.json({ error: { code: status, message, type: 'invalid_request_error' } }, { status })

export function startRouter(o: RouterOptions): Router {
  let loaded: string | null = null
  let loading: { model: string; timer: Timer } | null = null
  let busy = 0
  const queue: (() => void)[] = []
  const state = (id: string) => (id === loaded ? 'loaded' : id === loading?.model ? 'loading' : 'unloaded')
  const out: Router = {
    url: '',
    loads: 0,
    history: [],
    loaded: () => loaded,
    async stop() {
      if (loading) clearTimeout(loading.timer)
      await server.stop(true)
    },
  }

  function load(model: string) {
    if (loaded === model || loading?.model === model) return
    if (loading) clearTimeout(loading.timer)
    loaded = null
    out.loads++
    out.history.push({ ms: performance.now(), model })
    loading = {
      model,
      timer: setTimeout(() => {
        loaded = model
        loading = null
      }, o.loadMs),
    }
  }

  /** One slot, held for latencyMs. */
  async function serve() {
    if (busy >= o.slots) await new Promise<void>((resolve) => queue.push(resolve))
    else busy++
    await Bun.sleep(o.latencyMs)
    const next = queue.shift()
    if (next) next()
    else busy--
  }

  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    async fetch(req) {
      const url = new URL(req.url)
      if (req.method === 'GET' && url.pathname === '/models')
        return Response.json({
          data: Object.entries(o.models).map(([id, path]) => ({
            id,
            status: { value: state(id), args: ['--model', path] },
          })),
        })
      if (req.method === 'GET' && url.pathname === '/props') return Response.json({ total_slots: o.slots })
      if (req.method === 'GET' && url.pathname === '/health') return Response.json({ status: 'ok' })
      if (req.method !== 'POST') return error(404, 'not found')
      const body = (await req.json().catch(() => null)) as any
      const model = typeof body?.model === 'string' ? body.model : ''
      if (url.pathname === '/models/load') {
        if (!(model in o.models)) return error(400, `model ${model} not found`)
        load(model)
        return Response.json({ success: true })
      }
      if (url.pathname === '/models/unload') {
        if (state(model) === 'unloaded') return error(400, 'model is not running')
        const cut = loading
        if (cut && cut.model === model) {
          clearTimeout(cut.timer)
          loading = null
        } else loaded = null
        return Response.json({ success: true })
      }
      if (url.pathname === '/v1/chat/completions') {
        if (model !== loaded) return error(400, `model ${model} is not loaded`)
        o.onRequest?.(model, body)
        await serve()
        return Response.json({
          id: 'chatcmpl-standin',
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
        })
      }
      return error(404, 'not found')
    },
  })
  out.url = `http://127.0.0.1:${server.port}`
  return out
}
