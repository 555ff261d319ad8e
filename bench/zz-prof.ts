import { benchServer, post } from './lib/fixture'
import { load } from './lib/load'

const gk = await benchServer({ LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' })
const jwt = (await gk.deps.tokens.sign(gk.userId, 0)).token
const which = process.argv[2] ?? 'pool'
let reqs
if (which === 'hb') {
  const ids: string[] = []
  for (let i = 0; i < 64; i++)
    ids.push(
      (
        await post(`${gk.url}/workers/register`, gk.key, {
          name: `b${i}`,
          runtimes: [{ engine: 'ollama', base_url: 'http://x', status: 'online' }],
        })
      ).worker_id,
    )
  const body = JSON.stringify({
    activity: 'idle',
    current_job_id: null,
    vram_total_gb: 24,
    loaded_models: [],
    inventory: [],
  })
  reqs = ids.map((id) => ({
    url: `${gk.url}/workers/${id}/heartbeat`,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${gk.key}` },
    body,
  }))
} else {
  reqs = [
    {
      url: `${gk.url}${which === 'pool' ? '/v1/pool/capacity' : '/v1/models'}`,
      method: 'GET',
      headers: { authorization: `Bearer ${jwt}` },
    },
  ]
}
await load(reqs, 64, 500)
const r = await load(reqs, 64, 4000)
console.log(which, r.perSecond, r.errors)
await gk.stop()
process.exit(0)
