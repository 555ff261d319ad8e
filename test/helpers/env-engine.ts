// A stand-in engine for the daemon's hardening tests, run by bun as its own process. It takes the
// arguments either engine kind is started with and answers both: llama.cpp's router
// (`GET /models`, no model) and a launched engine serving one model (`GET /v1/models`,
// `POST /v1/chat/completions`). Its own flags (ignored by nothing else, passed by the test through
// --engine-args or the launch command):
//
//   --dump DIR    at start it writes DIR/<served name, or "router">.json: {pid, worker, env,
//                 reads} — its pid, the pid of a worker it starts in its own process group (as
//                 vLLM's EngineCore or the router's model processes are), the environment it sees,
//                 and what came of reading /proc/<pid>/environ of its parent (the daemon) and of its
//                 worker (a process of the same user that did nothing to prevent it): 'read' or the
//                 error's code
//   --noise N     once listening, writes N lines of output (about 100 bytes each), then `noise done`
//   --port P      where it listens; --served-model-name NAME the model it serves

import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

const args = process.argv.slice(2)
const flag = (name: string) => {
  const i = args.indexOf(name)
  return i >= 0 ? args[i + 1] : undefined
}
const served = flag('--served-model-name')
const dump = flag('--dump')

// A worker of its own that outlives a SIGTERM to this process: only its group's end stops it.
const worker = Bun.spawn(['sh', '-c', 'trap "" TERM; while :; do sleep 1; done'], {
  stdin: 'ignore',
  stdout: 'ignore',
  stderr: 'ignore',
})

function readEnviron(pid: number): string {
  try {
    readFileSync(`/proc/${pid}/environ`)
    return 'read'
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? 'error'
  }
}

if (dump)
  writeFileSync(
    join(dump, `${(served ?? 'router').replaceAll('/', '_')}.json`),
    JSON.stringify({
      pid: process.pid,
      worker: worker.pid,
      env: process.env,
      reads: { daemon: readEnviron(process.ppid), worker: readEnviron(worker.pid) },
    }),
  )

const json = (body: unknown, status = 200) => Response.json(body, { status })
Bun.serve({
  hostname: '127.0.0.1',
  port: Number(flag('--port')),
  async fetch(req) {
    const path = new URL(req.url).pathname
    if (path === '/models') return json({ data: [] })
    if (path === '/v1/models') return json({ object: 'list', data: served ? [{ id: served }] : [] })
    if (req.method === 'POST' && path === '/v1/chat/completions') {
      const body = (await req.json()) as { model?: string }
      return json({
        id: 'chatcmpl-1',
        object: 'chat.completion',
        model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
      })
    }
    return json({ error: { message: 'Not Found' } }, 404)
  },
})
console.log(`listening on ${flag('--port')}`)

const noise = Number(flag('--noise') ?? 0)
for (let i = 0; i < noise; i++) console.log(`noise line ${i} ${'x'.repeat(80)}`)
if (noise) console.log('noise done')
