// A stand-in inference runtime for daemon tests and benchmarks, started on a free port.
//
// OpenAI-compatible: GET /v1/models, POST /v1/chat/completions, /v1/completions, /v1/embeddings,
// /v1/responses.
// Faults are injected per request, by a marker in the request body or by `behaviour()`:
//   #500  #503  #429  #400     answer with that status (every time)
//   #500x2                     …only the first 2 attempts of this exact body, then succeed
//   #drop / #dropx1            close the connection without an answer
//   #hang                      never answer (the daemon's timeout must fire)
// A request whose body.model the runtime does not serve gets a 404, as vLLM answers.
//
// An engine of fixed capacity (`slots`): at most that many requests are served at once, each taking
// `latencyMs`; the rest wait in a queue, as llama-server's do (`queueLimit`: beyond that many
// waiting, 503 at once, as a bounded server sheds load). `refuseAbove`: 429 at once to a request
// arriving while more than that many are in flight (a rate-limiting gateway). `llama`: GET /props
// answers llama-server's shape with `total_slots`.
//
// Ollama-native mode (`ollama`): GET /api/tags, GET /api/ps, POST /api/show, POST /api/pull
// (streamed NDJSON progress; a pulled model then appears in /api/tags), POST /api/create (`from` and
// `parameters`: a model of the same weights, listed in /api/tags) and POST /api/generate (a load,
// no prompt), beside the /v1 routes. Every native POST body is kept in `ollamaCalls`.

export type Behaviour =
  | 'ok'
  | 'drop'
  | 'hang'
  | { status: number; body?: unknown; headers?: Record<string, string> }

export interface OllamaModelFixture {
  tag: { name: string; model?: string; size: number; digest: string; [k: string]: unknown }
  show: { modelfile: string; [k: string]: unknown }
}

export interface FakeRuntimeOptions {
  port?: number
  models?: string[]
  latencyMs?: number
  /** Requests served at once; more wait in a queue. Unbounded when absent. */
  slots?: number
  /** With `slots`: requests allowed to wait; one more gets 503. Unbounded when absent. */
  queueLimit?: number
  /** 429 to a request arriving while more than this many are in flight. */
  refuseAbove?: number
  /** Mimic llama-server: GET /props with total_slots (= slots). */
  llama?: boolean
  /** Awaited before a request is answered (a test holds one back until something happened). */
  hold?: (body: any) => Promise<void> | undefined
  /** Called as each inference request arrives, with its parsed body. */
  onRequest?: (body: any) => void
  behaviour?: (req: { path: string; raw: string; attempt: number }) => Behaviour | undefined
  ollama?: {
    models: OllamaModelFixture[]
    /** Names loaded in memory (/api/ps). */
    loaded?: string[]
    /** Awaited by /api/pull after its first progress line (a test holds a pull under way). */
    pullHold?: () => Promise<void>
    /** Models /api/pull can fetch, with the layers it reports. */
    library?: Record<string, OllamaModelFixture & { layers: { digest: string; size: number }[] }>
  }
}

export interface FakeRuntime {
  url: string
  port: number
  /** Inference requests received (any outcome). */
  requests: number
  /** Most inference requests in flight at once. */
  maxInFlight: number
  /** Inference requests in flight now (served and queued). */
  inFlight: number
  /** Requests answered 429 by `refuseAbove`, or 503 by `queueLimit`. */
  refused: number
  /** body.model of every inference request. */
  models: Set<string>
  pulls: string[]
  /** Ollama-native POSTs (/api/create, /api/generate, /api/pull, /api/show), in order, with their bodies. */
  ollamaCalls: { path: string; body: any }[]
  opts: FakeRuntimeOptions
  /** Closes the listener and every open connection (a crashed runtime). */
  stop(): Promise<void>
  /** Listens again on the same port. */
  restart(): void
}

const sha256Hex = (text: string) => new Bun.CryptoHasher('sha256').update(text).digest('hex')

const MARKER = /#(500|503|429|400|drop|hang)(?:x(\d+))?/

export function startFakeRuntime(opts: FakeRuntimeOptions = {}): FakeRuntime {
  const attempts = new Map<string, number>()
  let counter = 0
  // The engine's slots: a counting semaphore with a FIFO queue.
  let serving = 0
  const queue: (() => void)[] = []
  const takeSlot = async () => {
    if (opts.slots === undefined) return
    if (serving < opts.slots) {
      serving++
      return
    }
    await new Promise<void>((r) => queue.push(r))
  }
  const freeSlot = () => {
    if (opts.slots === undefined) return
    const next = queue.shift()
    if (next) next()
    else serving--
  }
  const ollamaModels = [...(opts.ollama?.models ?? [])]
  const rt: FakeRuntime = {
    url: '',
    port: 0,
    requests: 0,
    maxInFlight: 0,
    inFlight: 0,
    refused: 0,
    models: new Set(),
    pulls: [],
    ollamaCalls: [],
    opts,
    stop: async () => {},
    restart: () => {},
  }
  const served = () => [...(opts.models ?? []), ...ollamaModels.map((m) => m.tag.name)]

  const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
    new Response(JSON.stringify(body), {
      status,
      headers: { 'content-type': 'application/json', ...headers },
    })

  async function inference(path: string, req: Request): Promise<Response> {
    rt.requests++
    rt.inFlight++
    rt.maxInFlight = Math.max(rt.maxInFlight, rt.inFlight)
    let slot = false
    try {
      const raw = await req.text()
      const attempt = (attempts.get(raw) ?? 0) + 1
      attempts.set(raw, attempt)
      const parsed = opts.onRequest || opts.hold ? JSON.parse(raw) : null
      opts.onRequest?.(parsed)
      if (opts.refuseAbove !== undefined && rt.inFlight > opts.refuseAbove) {
        rt.refused++
        return json({ error: { message: 'too many requests', type: 'rate_limit_error' } }, 429)
      }
      if (opts.slots !== undefined && opts.queueLimit !== undefined && serving >= opts.slots) {
        if (queue.length >= opts.queueLimit) {
          rt.refused++
          return json({ error: { message: 'server busy', type: 'unavailable_error' } }, 503)
        }
      }
      await takeSlot()
      slot = true
      await opts.hold?.(parsed)
      if (opts.latencyMs) await Bun.sleep(opts.latencyMs)
      let b: Behaviour = opts.behaviour?.({ path, raw, attempt }) ?? 'ok'
      const m = MARKER.exec(raw)
      if (b === 'ok' && m && (!m[2] || attempt <= Number(m[2]))) {
        b = m[1] === 'drop' || m[1] === 'hang' ? m[1] : { status: Number(m[1]) }
      }
      if (b === 'hang') return await new Promise<Response>(() => {})
      if (b === 'drop') return new Response(new ReadableStream({ pull: (c) => c.error() }))
      if (b !== 'ok') {
        return json(
          b.body ?? { error: { message: `injected ${b.status}`, type: 'server_error' } },
          b.status,
          b.headers,
        )
      }
      const body = JSON.parse(raw)
      rt.models.add(body.model)
      if (!served().includes(body.model)) {
        return json(
          { error: { message: `The model \`${body.model}\` does not exist.`, type: 'NotFoundError' } },
          404,
        )
      }
      const n = ++counter
      const usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 }
      const created = Math.floor(Date.now() / 1000)
      if (path === '/v1/embeddings') {
        return json({
          object: 'list',
          model: body.model,
          data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2, 0.3] }],
          usage: { prompt_tokens: 7, total_tokens: 7 },
        })
      }
      if (path === '/v1/completions') {
        return json({
          id: `cmpl-${n}`,
          object: 'text_completion',
          created,
          model: body.model,
          choices: [{ index: 0, text: `echo: ${body.prompt}`, finish_reason: 'stop' }],
          usage,
        })
      }
      if (path === '/v1/responses') {
        // OpenAI's Responses object, as llama-server and vLLM answer it: an output_text message.
        const input = typeof body.input === 'string' ? body.input : (body.input?.at(-1)?.content ?? '')
        return json({
          id: `resp_${n}`,
          object: 'response',
          created_at: created,
          status: 'completed',
          model: body.model,
          output: [
            {
              type: 'message',
              id: `msg_${n}`,
              role: 'assistant',
              status: 'completed',
              content: [{ type: 'output_text', text: `echo: ${input}`, annotations: [] }],
            },
          ],
          usage: {
            input_tokens: 7,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens: 3,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: 10,
          },
        })
      }
      const last = body.messages?.[body.messages.length - 1]?.content ?? ''
      return json(
        {
          id: `chatcmpl-${n}`,
          object: 'chat.completion',
          created,
          model: body.model,
          choices: [
            { index: 0, message: { role: 'assistant', content: `echo: ${last}` }, finish_reason: 'stop' },
          ],
          usage,
        },
        200,
        { 'x-request-id': `rt-${n}` },
      )
    } finally {
      if (slot) freeSlot()
      rt.inFlight--
    }
  }

  async function pull(req: Request): Promise<Response> {
    const { model, name } = (await req.json()) as { model?: string; name?: string }
    const wanted = model ?? name ?? ''
    rt.pulls.push(wanted)
    const entry = opts.ollama?.library?.[wanted]
    const enc = new TextEncoder()
    const lines: unknown[] = [{ status: 'pulling manifest' }]
    if (!entry) lines.push({ error: 'pull model manifest: file does not exist' })
    else {
      for (const l of entry.layers) {
        lines.push({ status: `pulling ${l.digest.slice(7, 19)}`, digest: l.digest, total: l.size })
        lines.push({
          status: `pulling ${l.digest.slice(7, 19)}`,
          digest: l.digest,
          total: l.size,
          completed: l.size / 2,
        })
        lines.push({
          status: `pulling ${l.digest.slice(7, 19)}`,
          digest: l.digest,
          total: l.size,
          completed: l.size,
        })
      }
      lines.push({ status: 'verifying sha256 digest' }, { status: 'writing manifest' }, { status: 'success' })
    }
    return new Response(
      new ReadableStream({
        async start(c) {
          for (const [i, l] of lines.entries()) {
            c.enqueue(enc.encode(JSON.stringify(l) + '\n'))
            if (i === 1) await opts.ollama?.pullHold?.()
            await Bun.sleep(1)
          }
          if (entry) ollamaModels.push({ tag: entry.tag, show: entry.show })
          c.close()
        },
      }),
      { headers: { 'content-type': 'application/x-ndjson' } },
    )
  }

  const fetchHandler = async (req: Request): Promise<Response> => {
    const path = new URL(req.url).pathname
    if (req.method === 'POST' && path.startsWith('/v1/')) return inference(path, req)
    if (path === '/props' && opts.llama) {
      // llama-server's shape (tools/server: GET /props), the fields the daemon reads among others.
      return json({
        default_generation_settings: { n_ctx: 4096, params: {} },
        total_slots: opts.slots ?? 1,
        model_path: '/models/stand-in.gguf',
        chat_template: '',
        build_info: 'stand-in',
      })
    }
    if (path === '/v1/models') {
      return json({ object: 'list', data: served().map((id) => ({ id, object: 'model', owned_by: 'fake' })) })
    }
    if (opts.ollama) {
      if (path === '/api/tags') return json({ models: ollamaModels.map((m) => m.tag) })
      if (path === '/api/ps') {
        const loaded = opts.ollama.loaded ?? []
        return json({ models: ollamaModels.filter((m) => loaded.includes(m.tag.name)).map((m) => m.tag) })
      }
      if (req.method === 'POST' && path.startsWith('/api/')) {
        const body = (await req.clone().json()) as any
        rt.ollamaCalls.push({ path, body })
        // Ollama reads `name` as `name:latest`.
        const full = (name: string) => (name?.includes(':') ? name : `${name}:latest`)
        const named = (name: string) => ollamaModels.find((m) => full(m.tag.name) === full(name))
        if (path === '/api/show') {
          const found = named(body.model ?? body.name)
          return found?.show
            ? json(found.show)
            : json({ error: `model '${body.model ?? body.name}' not found` }, 404)
        }
        if (path === '/api/pull') return pull(req)
        if (path === '/api/create') {
          // Ollama 0.5.5+: a new manifest over the same blobs, its params layer replaced.
          const from = named(body.from)
          if (!from) return json({ error: `model '${body.from}' not found` }, 404)
          const params = Object.entries(body.parameters ?? {})
            .map(([k, v]) => `PARAMETER ${k} ${JSON.stringify(v)}`)
            .join('\n')
          const made = {
            tag: {
              ...from.tag,
              name: body.model,
              model: body.model,
              digest: sha256Hex(JSON.stringify(body)),
            },
            show: { ...from.show, modelfile: `${from.show.modelfile}\n${params}` },
          }
          const at = ollamaModels.findIndex((m) => m.tag.name === body.model)
          if (at >= 0) ollamaModels[at] = made
          else ollamaModels.push(made)
          return json({ status: 'success' })
        }
        if (path === '/api/generate') {
          if (!named(body.model)) return json({ error: `model '${body.model}' not found` }, 404)
          return json({ model: body.model, response: '', done: true, done_reason: 'load' })
        }
      }
    }
    return new Response('not found', { status: 404 })
  }

  let server: ReturnType<typeof Bun.serve>
  const listen = (port: number) => {
    server = Bun.serve({ port, hostname: '127.0.0.1', idleTimeout: 0, fetch: fetchHandler })
    rt.port = server.port!
    rt.url = `http://127.0.0.1:${rt.port}`
  }
  listen(opts.port ?? 0)
  rt.stop = async () => {
    await server.stop(true)
  }
  rt.restart = () => listen(rt.port)
  return rt
}

// `bun test/helpers/fake-runtime.ts [--slots N] [--latency-ms N] [--llama] [model…]` serves the
// stand-in runtime in its own process (the benchmark keeps it out of the daemon's RSS and CPU) and
// prints its URL on the first line.
if (import.meta.main) {
  const args = process.argv.slice(2)
  const models: string[] = []
  const o: FakeRuntimeOptions = {}
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--slots') o.slots = Number(args[++i])
    else if (args[i] === '--latency-ms') o.latencyMs = Number(args[++i])
    else if (args[i] === '--llama') o.llama = true
    else models.push(args[i]!)
  }
  const rt = startFakeRuntime({ ...o, models: models.length ? models : ['bench-model'] })
  console.log(rt.url)
  process.on('SIGTERM', () => void rt.stop().then(() => process.exit(0)))
}
