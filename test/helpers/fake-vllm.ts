// A stand-in for `vllm serve` (and SGLang's launch_server) for the daemon's launched-engine tests,
// run by bun as its own process: `bun test/helpers/fake-vllm.ts serve MODEL_DIR
// --served-model-name NAME --host 127.0.0.1 --port P [flags…]` (`--model-path DIR` as SGLang
// takes it works too).
//
// - It "loads" the model directory: its config.json must be a JSON object and a weights file
//   (*.safetensors) must be there, else it prints a Python-like traceback and exits 1, as vLLM
//   does for a corrupt model. Then it waits FAKE_VLLM_LOAD_MS (default 100) before it binds its
//   port, as a real engine answers only once the weights are on the GPU.
// - GET /health, GET /v1/models (the served name), POST /v1/chat/completions and
//   /v1/completions answer naming the model and this process (`<name> (pid N) says: …`); another
//   `model` gets vLLM's 404.
// - Told through files in the directory FAKE_VLLM_CONTROL (when set), keyed by the served name
//   with `/` as `_`:
//     <key>.starts.jsonl  it appends {pid, argv} at each start (the tests read its command line)
//     <key>.hold          while it exists, the load does not end (a test holds a model loading)
//     <key>.crash         holding N: the request after the Nth answered one makes it print an
//                         engine error and exit 1 (the file is removed first: it crashes once)
// - SIGTERM: it says so and exits 0.

import { appendFileSync, existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'

const args = process.argv.slice(2)
if (args[0] === 'serve') args.shift()

function flag(name: string): string | undefined {
  const i = args.indexOf(name)
  if (i >= 0) return args[i + 1]
  const eq = args.find((a) => a.startsWith(`${name}=`))
  return eq?.slice(name.length + 1)
}

const modelDir = flag('--model-path') ?? flag('--model') ?? (args[0]?.startsWith('--') ? undefined : args[0])
const served = flag('--served-model-name') ?? modelDir ?? ''
const port = Number(flag('--port') ?? 8000)
const host = flag('--host') ?? '127.0.0.1'
const control = process.env.FAKE_VLLM_CONTROL
const key = served.replaceAll('/', '_')
const controlFile = (ext: string) => (control ? join(control, `${key}.${ext}`) : null)

const info = (msg: string) => console.log(`INFO fake-vllm ${msg}`)
const fail = (lines: string[]): never => {
  for (const l of lines) console.error(l)
  process.exit(1)
}

const starts = controlFile('starts.jsonl')
if (starts) appendFileSync(starts, `${JSON.stringify({ pid: process.pid, argv: process.argv.slice(2) })}\n`)

info(`vLLM API server version 0.0.0-fake; args: ${args.join(' ')}`)
if (!modelDir) fail(['error: the following arguments are required: model_tag'])
let config: unknown
try {
  config = JSON.parse(readFileSync(join(modelDir!, 'config.json'), 'utf8'))
} catch (e) {
  fail([
    'Traceback (most recent call last):',
    `  File "vllm/transformers_utils/config.py", line 312, in get_config`,
    `ValueError: Invalid repository ID or local directory specified: '${modelDir}' (config.json: ${(e as Error).message})`,
  ])
}
if (typeof config !== 'object' || config === null || Array.isArray(config))
  fail([`ValueError: ${modelDir}/config.json is not a model config`])
if (!readdirSync(modelDir!).some((f) => f.endsWith('.safetensors')))
  fail([`RuntimeError: Cannot find any model weights with '${modelDir}'`])
info(`loading weights from ${modelDir}`)

const hold = controlFile('hold')
const loadMs = Number(process.env.FAKE_VLLM_LOAD_MS ?? 100)
await Bun.sleep(loadMs)
while (hold && existsSync(hold)) await Bun.sleep(20)

let answered = 0
const crash = controlFile('crash')

function crashNow(): never {
  console.error('ERROR fake-vllm EngineCore encountered a fatal error.')
  console.error('RuntimeError: CUDA error: an illegal memory access was encountered')
  process.exit(1)
}

const json = (body: unknown, status = 200) => Response.json(body, { status })

const server = Bun.serve({
  hostname: host,
  port,
  async fetch(req) {
    const path = new URL(req.url).pathname
    if (req.method === 'GET' && path === '/health') return new Response('')
    if (req.method === 'GET' && path === '/v1/models')
      return json({
        object: 'list',
        data: [{ id: served, object: 'model', owned_by: 'vllm', root: modelDir, max_model_len: 4096 }],
      })
    if (req.method !== 'POST' || (path !== '/v1/chat/completions' && path !== '/v1/completions'))
      return json({ error: { message: 'Not Found', type: 'NotFoundError', code: 404 } }, 404)
    if (crash && existsSync(crash) && answered >= Number(readFileSync(crash, 'utf8'))) {
      rmSync(crash, { force: true })
      crashNow()
    }
    const body = (await req.json().catch(() => null)) as any
    if (body?.model !== served)
      return json(
        {
          error: {
            message: `The model \`${body?.model}\` does not exist.`,
            type: 'NotFoundError',
            code: 404,
          },
        },
        404,
      )
    const prompt =
      path === '/v1/chat/completions'
        ? String(body.messages?.at(-1)?.content ?? '')
        : String(body.prompt ?? '')
    const text = `${served} (pid ${process.pid}) says: ${prompt}`
    answered++
    const usage = { prompt_tokens: prompt.length, completion_tokens: 4, total_tokens: prompt.length + 4 }
    return json(
      path === '/v1/chat/completions'
        ? {
            id: `chatcmpl-${answered}`,
            object: 'chat.completion',
            model: served,
            choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
            usage,
          }
        : {
            id: `cmpl-${answered}`,
            object: 'text_completion',
            model: served,
            choices: [{ index: 0, text, finish_reason: 'stop' }],
            usage,
          },
    )
  },
})
info(`Uvicorn running on http://${host}:${server.port} (Press CTRL+C to quit)`)

process.on('SIGTERM', () => {
  info('Shutting down FastAPI HTTP server.')
  server.stop(true)
  process.exit(0)
})
