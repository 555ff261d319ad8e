import { afterAll, describe, expect, test } from 'bun:test'
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DigestCache } from '../../src/daemon/runtimes/digests'
import {
  derivedModelName,
  OllamaRuntime,
  ollamaName,
  parseModelfileBlobs,
} from '../../src/daemon/runtimes/ollama'
import { OpenAIRuntime } from '../../src/daemon/runtimes/openai'
import type { PullProgress } from '../../src/daemon/runtimes/types'
import { StateDir } from '../../src/daemon/state'
import { type OllamaModelFixture, startFakeRuntime } from '../helpers/fake-runtime'
import { capturedLogLines } from '../helpers/secrets'

const fixtures = join(import.meta.dir, '../fixtures/ollama')
const load = async (name: string) => Bun.file(join(fixtures, name)).json()
const root = mkdtempSync(join(tmpdir(), 'gk-rt-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

// Recorded answers of a real Ollama: /api/tags gives manifest digests; the weights blobs are named
// in each /api/show modelfile.
const TAGS = await load('tags.json')
const PS = await load('ps.json')
const SHOW: Record<string, any> = {
  'llama3.2:latest': await load('show-llama3.2.json'),
  'llava:7b': await load('show-llava-7b.json'),
  'nomic-embed-text:latest': await load('show-nomic-embed-text.json'),
}
const LLAMA_WEIGHTS = 'dde5aa3fc5ffc17176b5e8bdc82f587b24b2678c6c66101bf7da77af9f7ccdff'
const LLAMA_MANIFEST = 'a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72'
const fixtureModels = (): OllamaModelFixture[] =>
  TAGS.models.map((tag: any) => ({ tag, show: SHOW[tag.name] }))

describe('ollama: which digest is which', () => {
  test('the modelfile FROM lines name the weights blob first, then projectors', () => {
    expect(parseModelfileBlobs(SHOW['llama3.2:latest'].modelfile)).toMatchObject({
      weights: LLAMA_WEIGHTS,
      projectors: [],
    })
    expect(parseModelfileBlobs(SHOW['llava:7b'].modelfile)).toMatchObject({
      weights: '170370233dd5c5415250a2ecd5c71586352850729062ccef1496385647293868',
      projectors: ['72d6f08a42f656d36b356dbe0920675899a99ce21192fd66266fb7d82ed07539'],
    })
    // Older Ollama: blobs/sha256:<hex>.
    expect(parseModelfileBlobs(SHOW['nomic-embed-text:latest'].modelfile).weights).toBe(
      '970aa74c0a90ef7482477cf803618e776e173c007bf957f635f1015bfcfef0e6',
    )
    // A "FROM" inside the license text is not a blob.
    expect(parseModelfileBlobs('LICENSE """\nFROM the date of acceptance\n"""').weights).toBeNull()
  })

  test('inventory reports the weights blob sha256, never the /api/tags manifest digest', async () => {
    const rt = startFakeRuntime({
      ollama: { models: fixtureModels(), loaded: PS.models.map((m: any) => m.name) },
    })
    try {
      const snap = await new OllamaRuntime(rt.url, 'ollama').snapshot()
      expect(snap.status).toBe('online')
      expect(snap.models).toEqual(['llama3.2:latest', 'llava:7b', 'nomic-embed-text:latest'])
      expect(snap.loaded).toEqual(['llama3.2:latest'])
      expect(snap.inventory).toEqual([
        {
          local_name: 'llama3.2:latest',
          sha256: LLAMA_WEIGHTS,
          size_bytes: 2019393189,
          loaded: true,
          runtime: 'ollama',
        },
        {
          local_name: 'llava:7b',
          sha256: '170370233dd5c5415250a2ecd5c71586352850729062ccef1496385647293868',
          size_bytes: 4733363377,
          loaded: false,
          runtime: 'ollama',
        },
        {
          local_name: 'llava:7b+projector',
          sha256: '72d6f08a42f656d36b356dbe0920675899a99ce21192fd66266fb7d82ed07539',
          size_bytes: 0,
          loaded: false,
          runtime: 'ollama',
        },
        {
          local_name: 'nomic-embed-text:latest',
          sha256: '970aa74c0a90ef7482477cf803618e776e173c007bf957f635f1015bfcfef0e6',
          size_bytes: 274302450,
          loaded: false,
          runtime: 'ollama',
        },
      ])
      expect(snap.inventory.some((i) => i.sha256 === LLAMA_MANIFEST)).toBe(false)
    } finally {
      await rt.stop()
    }
  })

  test('a model whose /api/show fails is advertised by name only', async () => {
    const models = fixtureModels()
    models[1]!.show = undefined as any
    // llava is listed by /api/tags but its /api/show answers 404.
    const rt = startFakeRuntime({ ollama: { models } })
    try {
      const runtime = new OllamaRuntime(rt.url, 'ollama')
      const snap = await runtime.snapshot()
      expect(snap.models).toContain('llava:7b')
      expect(snap.inventory.map((i) => i.local_name)).toEqual(['llama3.2:latest', 'nomic-embed-text:latest'])
    } finally {
      await rt.stop()
    }
  })

  test('serves() treats name and name:latest as one model', async () => {
    const rt = startFakeRuntime({ ollama: { models: fixtureModels() } })
    try {
      const runtime = new OllamaRuntime(rt.url, 'ollama')
      const snap = await runtime.snapshot()
      expect(runtime.serves('llama3.2', snap)).toBe(true)
      expect(runtime.serves('llama3.2:latest', snap)).toBe(true)
      expect(runtime.serves('llava:13b', snap)).toBe(false)
      expect(ollamaName('qwen2.5:7b')).toBe('qwen2.5:7b')
    } finally {
      await rt.stop()
    }
  })

  test('an unreachable runtime is offline with nothing in it', async () => {
    const rt = startFakeRuntime({ ollama: { models: [] } })
    await rt.stop()
    const snap = await new OllamaRuntime(rt.url, 'ollama').snapshot()
    expect(snap).toMatchObject({ status: 'offline', inventory: [], models: [], loaded: [] })
  })

  test("a profile's options become a derived model (POST /api/create), hidden from the inventory; keep_alive follows the job", async () => {
    const rt = startFakeRuntime({ ollama: { models: fixtureModels(), loaded: [] } })
    try {
      const runtime = new OllamaRuntime(rt.url, 'ollama')
      const params = { num_ctx: 8192, num_gpu: 99, temperature: 0.2, stop: ['</s>'], keep_alive: '1h' }
      const engine = await runtime.prepareJob({ model: 'llama3.2', params }, new AbortController().signal)
      const options = { num_ctx: 8192, num_gpu: 99, temperature: 0.2, stop: ['</s>'] }
      expect(engine.model).toBe(derivedModelName('llama3.2', options))
      expect(engine.model).toMatch(/^gridkeep\/llama3\.2:[0-9a-f]{12}$/)
      // One name per base and options, whatever their order; another option, another name.
      expect(
        derivedModelName('llama3.2:latest', { stop: ['</s>'], temperature: 0.2, num_gpu: 99, num_ctx: 8192 }),
      ).toBe(engine.model)
      expect(derivedModelName('llama3.2', { ...options, num_ctx: 4096 })).not.toBe(engine.model)
      expect(rt.ollamaCalls).toEqual([
        {
          path: '/api/create',
          body: { model: engine.model, from: 'llama3.2', parameters: options, stream: false },
        },
      ])
      // The derived model is Ollama's, not the catalogue's: never in the inventory; loaded, it
      // counts its base (same weights) as loaded.
      rt.opts.ollama!.loaded = [engine.model]
      const snap = await runtime.snapshot()
      expect(snap.models).toEqual(['llama3.2:latest', 'llava:7b', 'nomic-embed-text:latest'])
      expect(snap.loaded).toEqual(['llama3.2:latest'])
      expect(snap.inventory.find((i) => i.local_name === 'llama3.2:latest')?.loaded).toBe(true)
      // After the job: a load request carrying keep_alive (no prompt).
      await engine.finish!()
      expect(rt.ollamaCalls.at(-1)).toEqual({
        path: '/api/generate',
        body: { model: engine.model, keep_alive: '1h', stream: false },
      })
      // keep_alive alone needs no model of its own; nothing at all, nothing sent.
      const calls = rt.ollamaCalls.length
      expect(
        (
          await runtime.prepareJob(
            { model: 'llava:7b', params: { keep_alive: -1 } },
            new AbortController().signal,
          )
        ).model,
      ).toBe('llava:7b')
      expect(rt.ollamaCalls).toHaveLength(calls)
    } finally {
      await rt.stop()
    }
  })

  test('Ollama refusing the options fails with its words', async () => {
    const rt = startFakeRuntime({ ollama: { models: fixtureModels() } })
    try {
      const runtime = new OllamaRuntime(rt.url, 'ollama')
      await expect(
        runtime.prepareJob({ model: 'absent:1', params: { num_ctx: 8192 } }, new AbortController().signal),
      ).rejects.toThrow(
        /ollama refused the serving profile's options for absent:1: .*404.*model 'absent:1' not found/,
      )
    } finally {
      await rt.stop()
    }
  })

  test('pull streams progress, then the model is in the inventory with the pinned digest', async () => {
    const weights = 'b'.repeat(64)
    const tag = { name: 'qwen2.5:0.5b', model: 'qwen2.5:0.5b', size: 397821319, digest: 'c'.repeat(64) }
    const show = { modelfile: `FROM /root/.ollama/models/blobs/sha256-${weights}\nTEMPLATE {{ .Prompt }}\n` }
    const rt = startFakeRuntime({
      ollama: {
        models: [],
        library: {
          'qwen2.5:0.5b': {
            tag,
            show,
            layers: [
              { digest: `sha256:${weights}`, size: 397807936 },
              { digest: `sha256:${'d'.repeat(64)}`, size: 1482 },
            ],
          },
        },
      },
    })
    try {
      const runtime = new OllamaRuntime(rt.url, 'ollama')
      const seen: PullProgress[] = []
      const task = { catalogue_id: 'qwen2-5-0-5b-q4km', runtime: 'ollama', runtime_model_id: 'qwen2.5:0.5b' }
      await runtime.pull({ ...task, digest: `sha256:${weights.toUpperCase()}` }, (p) => seen.push(p))
      expect(rt.pulls).toEqual(['qwen2.5:0.5b'])
      const downloading = seen.filter((p) => p.status === 'downloading')
      expect(downloading.length).toBeGreaterThan(2)
      expect(downloading.at(-1)).toEqual({
        status: 'downloading',
        completed_bytes: 397809418,
        total_bytes: 397809418,
      })
      // Progress never goes backwards.
      for (let i = 1; i < downloading.length; i++)
        expect(downloading[i]!.completed_bytes!).toBeGreaterThanOrEqual(downloading[i - 1]!.completed_bytes!)
      expect(seen.some((p) => p.status === 'verifying')).toBe(true)
      const snap = await runtime.snapshot()
      expect(snap.inventory.find((i) => i.local_name === 'qwen2.5:0.5b')?.sha256).toBe(weights)
    } finally {
      await rt.stop()
    }
  })

  test('pull fails on a digest other than the catalogue pin, and on an unknown model', async () => {
    const tag = { name: 'm:1', size: 10, digest: 'e'.repeat(64) }
    const rt = startFakeRuntime({
      ollama: {
        models: [],
        library: {
          'm:1': {
            tag,
            show: { modelfile: `FROM /b/sha256-${'1'.repeat(64)}` },
            layers: [{ digest: 'sha256:x', size: 10 }],
          },
        },
      },
    })
    try {
      const runtime = new OllamaRuntime(rt.url, 'ollama')
      const base = { catalogue_id: 'm', runtime: 'ollama' }
      await expect(
        runtime.pull({ ...base, runtime_model_id: 'm:1', digest: '2'.repeat(64) }, () => {}),
      ).rejects.toThrow(/not the catalogue's/)
      await expect(runtime.pull({ ...base, runtime_model_id: 'nope:1' }, () => {})).rejects.toThrow(
        /file does not exist/,
      )
    } finally {
      await rt.stop()
    }
  })
})

describe('openai runtime', () => {
  test('inventory from /v1/models with digests of the files the operator named', async () => {
    const weights = join(root, 'qwen.gguf')
    const mmproj = join(root, 'mmproj.gguf')
    writeFileSync(weights, 'weights bytes'.repeat(1000))
    writeFileSync(mmproj, 'projector bytes')
    const sha = (s: string) => createHash('sha256').update(s).digest('hex')
    const rt = startFakeRuntime({ models: ['Qwen/Qwen2.5-7B-Instruct', 'other-model'] })
    try {
      const state = new StateDir(join(root, 'state-openai'))
      const runtime = new OpenAIRuntime(
        rt.url,
        'vllm',
        { 'Qwen/Qwen2.5-7B-Instruct': [weights, mmproj], 'not-served': [weights] },
        new DigestCache(state),
      )
      await runtime.prepare()
      const snap = await runtime.snapshot()
      expect(snap.status).toBe('online')
      expect(snap.models).toEqual(['Qwen/Qwen2.5-7B-Instruct', 'other-model'])
      expect(snap.loaded).toEqual(snap.models)
      expect(snap.inventory).toEqual([
        {
          local_name: 'Qwen/Qwen2.5-7B-Instruct',
          sha256: sha('weights bytes'.repeat(1000)),
          size_bytes: 13000,
          loaded: true,
          runtime: 'vllm',
        },
        {
          local_name: 'Qwen/Qwen2.5-7B-Instruct+mmproj.gguf',
          sha256: sha('projector bytes'),
          size_bytes: 15,
          loaded: true,
          runtime: 'vllm',
        },
      ])
      expect(runtime.serves('other-model', snap)).toBe(true)
      expect(runtime.serves('not-served', snap)).toBe(false)
    } finally {
      await rt.stop()
    }
  })

  test('digests are cached by path+size+mtime in the state dir and recomputed when the file changes', async () => {
    const file = join(root, 'cached.gguf')
    writeFileSync(file, 'version one')
    const state = new StateDir(join(root, 'state-cache'))
    const first = await new DigestCache(state).digest(file)
    expect(first?.sha256).toBe(createHash('sha256').update('version one').digest('hex'))
    // Prove a second daemon reads the cache rather than hashing: plant a marker value in it.
    const cache = state.readJson<Record<string, any>>('digests.json')!
    cache[file].sha256 = 'f'.repeat(64)
    state.writeJson('digests.json', cache)
    expect((await new DigestCache(state).digest(file))?.sha256).toBe('f'.repeat(64))
    // Same size, new mtime: recomputed.
    writeFileSync(file, 'version two')
    utimesSync(file, new Date(), new Date(Date.now() + 5000))
    expect((await new DigestCache(state).digest(file))?.sha256).toBe(
      createHash('sha256').update('version two').digest('hex'),
    )
    expect(await new DigestCache(state).digest(join(root, 'missing.gguf'))).toBeNull()
  })

  test('peek never waits for hashing: null first, the digest once hashed', async () => {
    const file = join(root, 'peek.gguf')
    writeFileSync(file, 'peek')
    const cache = new DigestCache(new StateDir(join(root, 'state-peek')))
    expect(cache.peek(file)).toBeNull()
    await cache.digest(file)
    expect(cache.peek(file)?.sha256).toBe(createHash('sha256').update('peek').digest('hex'))
  })

  test('an unreachable server is offline; a broken answer is an error', async () => {
    const rt = startFakeRuntime({ models: ['m'] })
    await rt.stop()
    const state = new StateDir(join(root, 'state-off'))
    expect((await new OpenAIRuntime(rt.url, 'openai', {}, new DigestCache(state)).snapshot()).status).toBe(
      'offline',
    )
    const broken = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      fetch: () => new Response('oops', { status: 500 }),
    })
    try {
      const snap = await new OpenAIRuntime(
        `http://127.0.0.1:${broken.port}`,
        'openai',
        {},
        new DigestCache(state),
      ).snapshot()
      expect(snap.status).toBe('error')
    } finally {
      await broken.stop(true)
    }
  })
})

describe('openai runtime with --engine llama.cpp: digests discovered', () => {
  /** What llama-server answers: /v1/models and /props (its model_path). */
  function llamaServer(o: { ids: string[]; modelPath?: string }) {
    const props: string[] = []
    const server = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      fetch(req) {
        const path = new URL(req.url).pathname
        if (path === '/v1/models') return Response.json({ object: 'list', data: o.ids.map((id) => ({ id })) })
        if (path === '/props') {
          props.push(path)
          return Response.json({ model_path: o.modelPath, total_slots: 4 })
        }
        return new Response('not found', { status: 404 })
      },
    })
    return { url: `http://127.0.0.1:${server.port}`, props, stop: () => server.stop(true) }
  }
  const sha = (s: string) => createHash('sha256').update(s).digest('hex')

  test('the file /props names is hashed and reported as the served model’s sha256, with no --model-file', async () => {
    const file = join(root, 'served.gguf')
    writeFileSync(file, 'gguf weights served')
    const server = llamaServer({ ids: ['tiny'], modelPath: file })
    try {
      const runtime = new OpenAIRuntime(
        server.url,
        'llama.cpp',
        {},
        new DigestCache(new StateDir(join(root, 's1'))),
      )
      const hashed = new Promise<void>((resolve) => runtime.onInventoryChange(resolve))
      await runtime.prepare()
      // Being hashed: not advertised at all (by name alone it could match other weights).
      expect(await runtime.snapshot()).toMatchObject({ status: 'online', models: [], inventory: [] })
      await hashed
      const snap = await runtime.snapshot()
      expect(snap.models).toEqual(['tiny'])
      expect(snap.inventory).toEqual([
        {
          local_name: 'tiny',
          sha256: sha('gguf weights served'),
          size_bytes: 19,
          loaded: true,
          runtime: 'llama.cpp',
        },
      ])
      // Another engine name does not ask llama.cpp's /props.
      const calls = server.props.length
      const vllm = new OpenAIRuntime(server.url, 'vllm', {}, new DigestCache(new StateDir(join(root, 's2'))))
      await vllm.prepare()
      expect((await vllm.snapshot()).inventory).toEqual([])
      expect(server.props).toHaveLength(calls)
    } finally {
      await server.stop()
    }
  })

  test('a /v1/models id that is the file’s path (no --alias) is hashed too', async () => {
    const file = join(root, 'by-path.gguf')
    writeFileSync(file, 'weights by path')
    const server = llamaServer({ ids: [file] })
    try {
      const runtime = new OpenAIRuntime(
        server.url,
        'llama.cpp',
        {},
        new DigestCache(new StateDir(join(root, 's3'))),
      )
      const hashed = new Promise<void>((resolve) => runtime.onInventoryChange(resolve))
      await runtime.snapshot()
      await hashed
      expect((await runtime.snapshot()).inventory).toMatchObject([
        { local_name: file, sha256: sha('weights by path') },
      ])
    } finally {
      await server.stop()
    }
  })

  test('a file not readable here is said once, and the model is matched by name only', async () => {
    const missing = join(root, 'in-a-container', 'model.gguf')
    const server = llamaServer({ ids: ['remote'], modelPath: missing })
    const before = capturedLogLines().length
    try {
      const runtime = new OpenAIRuntime(
        server.url,
        'llama.cpp',
        {},
        new DigestCache(new StateDir(join(root, 's4'))),
      )
      await runtime.prepare()
      const first = await runtime.snapshot()
      await runtime.snapshot()
      expect(first.models).toEqual(['remote'])
      expect(first.inventory).toEqual([])
      const said = capturedLogLines()
        .slice(before)
        .filter((l) => l.includes('not readable here'))
      expect(said).toHaveLength(1)
      expect(JSON.parse(said[0]!)).toMatchObject({
        level: 'warn',
        model: 'remote',
        path: missing,
        error: 'ENOENT',
      })
    } finally {
      await server.stop()
    }
  })
})

test('a model file hashed in the background announces the changed inventory', async () => {
  const file = join(root, 'swapped.gguf')
  writeFileSync(file, 'a model swapped in later')
  const cache = new DigestCache(new StateDir(join(root, 'state-swap')))
  const changed = new Promise<void>((resolve) => cache.onHashed(resolve))
  expect(cache.peek(file)).toBeNull()
  await changed
  expect(cache.peek(file)?.sha256).toBe(createHash('sha256').update('a model swapped in later').digest('hex'))
})
