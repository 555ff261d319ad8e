import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { newId } from '../../src/lib/ids'
import { type CliIo, catalogueCommand } from '../../src/modules/catalogue/cli'
import { stubId } from '../../src/modules/catalogue/discover'
import { checkManifest, idViolations } from '../../src/modules/catalogue/manifest'
import { applyManifest } from '../../src/modules/catalogue/seed'
import { makeTestApp, type TestApp } from '../helpers/app'
import { makeUser } from '../helpers/builders'
import { fakeDigest, makeCatalogEntry } from '../helpers/catalogue'
import { rowsOf } from '../helpers/rows'

// `gridkeep catalogue check|discover` (docs/api.md §4 catalogue rule 8; the same validation as seeding).

const dir = mkdtempSync(join(tmpdir(), 'gridkeep-cli-'))
const apps: TestApp[] = []
afterAll(() => {
  for (const t of apps) t.close()
  rmSync(dir, { recursive: true, force: true })
})

function run(argv: string[], env: Record<string, string> = {}) {
  const out: string[] = []
  const err: string[] = []
  const io: CliIo = { out: (l) => void out.push(l), err: (l) => void err.push(l), env }
  return catalogueCommand(argv, io).then((code) => ({ code, out, err }))
}

let fileNo = 0
const write = (text: string) => {
  const path = join(dir, `m${++fileNo}.yaml`)
  writeFileSync(path, text)
  return path
}

describe('catalogue check', () => {
  test('the shipped catalogue/models.yaml passes with zero violations', async () => {
    const r = await run(['check', 'catalogue/models.yaml'])
    expect(r.code).toBe(0)
    expect(r.out).toEqual([expect.stringMatching(/^catalogue\/models\.yaml: OK, \d+ entries, 0 violations$/)])
  })

  test('prints every violation (index, id, rule) and exits 1', async () => {
    const path = write(
      [
        'models:',
        '  - { id: fine, task_type: chat, runtime: ollama, runtime_model_id: "fine:1" }',
        '  - { id: Not_Valid, task_type: chat, runtime: ollama, runtime_model_id: a }',
        '  - { id: llama-8b, quantization: Q4_K_M, task_type: chat, runtime: ollama, runtime_model_id: b }',
        '  - { id: phi-vllm, task_type: chat, runtime: vllm, runtime_model_id: c }',
        '  - { id: typo, task_typ: chat, runtime: ollama, runtime_model_id: d }',
      ].join('\n'),
    )
    const r = await run(['check', path])
    expect(r.code).toBe(1)
    expect(r.out).toHaveLength(5)
    expect(r.out[0]).toBe(
      `${path}: models[1] "Not_Valid": rule 1: id "Not_Valid" must be lowercase [a-z0-9] segments joined by "-"`,
    )
    expect(r.out[1]).toStartWith(`${path}: models[2] "llama-8b": rule 2: `)
    expect(r.out[1]).toContain('-q4km')
    expect(r.out[2]).toStartWith(`${path}: models[3] "phi-vllm": rule 3: `)
    expect(r.out[3]).toBe(`${path}: models[4] "typo": schema: /task_typ: unknown field`)
    expect(r.out[4]).toBe(`${path}: 4 violation(s) in 4 of 5 entries`)
  })

  test('params: a wrong type is an error (exit 1, the param left out), an unknown key of an open-ended engine a warning naming the closest', async () => {
    const path = write(
      [
        'models:',
        '  - id: tiny-q80',
        '    task_type: chat',
        '    serving_profiles:',
        '      - { runtime: llama.cpp, runtime_model_id: tiny, params: { ctx_size: 4096, n_gpu_layer: 99 } }',
        '  - id: small-q80',
        '    task_type: chat',
        '    serving_profiles:',
        '      - { runtime: ollama, runtime_model_id: small, params: { num_ctx: "8k" } }',
      ].join('\n'),
    )
    const r = await run(['check', path])
    expect(r.code).toBe(1)
    expect(r.out).toEqual([
      `${path}: models[0] "tiny-q80": warning: /serving_profiles/0/params (llama.cpp): param "n_gpu_layer" is not a llama.cpp setting gridkeep knows (did you mean "n_gpu_layers"?); it is passed to the engine as written`,
      `${path}: models[1] "small-q80": error: /serving_profiles/0/params (ollama): param "num_ctx" must be an integer (got "8k"); left out`,
      `${path}: 2 entries, 0 violations, 1 param error(s), left out of their entries, 1 warning(s)`,
    ])
  })

  test('warnings alone pass: exit 0', async () => {
    const path = write(
      [
        'models:',
        '  - id: tiny-q80',
        '    task_type: chat',
        '    serving_profiles:',
        '      - { runtime: vllm, runtime_model_id: org/tiny, params: { max_model_length: 8192 } }',
      ].join('\n'),
    )
    const r = await run(['check', path])
    expect(r.code).toBe(0)
    expect(r.out.at(-1)).toBe(`${path}: OK, 1 entries, 0 violations, 1 warning(s)`)
  })

  test('a file that is not a manifest exits 1; a missing file or bad usage exits 2', async () => {
    const notYaml = await run(['check', write('models: [oops\n  - : :\n')])
    expect(notYaml.code).toBe(1)
    expect(notYaml.err[0]).toContain('not valid YAML')
    expect((await run(['check', write('just: text\n')])).code).toBe(1)
    expect((await run(['check', join(dir, 'missing.yaml')])).code).toBe(2)
    expect((await run(['check'])).code).toBe(2)
    expect((await run(['check', 'a.yaml', 'b.yaml'])).code).toBe(2)
    expect((await run([])).code).toBe(2)
    expect((await run(['frobnicate'])).code).toBe(2)
  })

  test('--help prints the usage and exits 0', async () => {
    const r = await run(['--help'])
    expect(r.code).toBe(0)
    expect(r.out.join('\n')).toContain('check <file>')
    expect(r.out.join('\n')).toContain('discover [--manifest PATH]')
  })

  test('runs directly: bun run src/modules/catalogue/cli.ts check …', () => {
    const ok = Bun.spawnSync(['bun', 'run', 'src/modules/catalogue/cli.ts', 'check', 'catalogue/models.yaml'])
    expect(ok.exitCode).toBe(0)
    expect(ok.stdout.toString()).toContain('0 violations')
    const bad = Bun.spawnSync([
      'bun',
      'run',
      'src/modules/catalogue/cli.ts',
      'check',
      write('models:\n  - { id: X, task_type: chat, runtime: ollama, runtime_model_id: x }\n'),
    ])
    expect(bad.exitCode).toBe(1)
  })
})

describe('catalogue discover', () => {
  // A fleet whose workers report models, some covered by the catalogue and some not.
  async function fleet() {
    const t = makeTestApp()
    apps.push(t)
    const owner = await makeUser(t)
    const now = t.clock.now()
    const { db, tables } = rowsOf(t.deps)
    const addWorker = async (engines: string[]) => {
      const id = newId('wrk_')
      await db.insert(tables.workers).values({
        id,
        org_id: owner.personalOrgId,
        name: id,
        status: 'online',
        registered_at: now,
        last_seen_at: now,
      })
      for (const engine of engines)
        await db
          .insert(tables.workerRuntimes)
          .values({ worker_id: id, engine, base_url: 'http://gpu:1', status: 'online' })
      return id
    }
    const report = (
      workerId: string,
      m: { name: string; runtime?: string | null; digest?: string | null; size_bytes?: number },
    ) =>
      db.insert(tables.workerModels).values({
        worker_id: workerId,
        name: m.name,
        runtime: m.runtime ?? null,
        digest: m.digest ?? null,
        size_bytes: m.size_bytes ?? null,
      })

    const w1 = await addWorker(['ollama'])
    const w2 = await addWorker(['ollama', 'vllm'])
    // Covered: by serving-profile name (no digest on either side) …
    await makeCatalogEntry(t.deps, { id: 'known-by-name', runtime_model_id: 'known:latest' })
    await report(w1, { name: 'known:latest', runtime: 'ollama' })
    // … and by digest, whatever the local name.
    await makeCatalogEntry(t.deps, { id: 'known-by-digest', digest: fakeDigest('known') })
    await report(w1, { name: 'my-own-tag', runtime: 'ollama', digest: `sha256:${fakeDigest('known')}` })
    // Not covered: a new model on two workers (one stub), a new vLLM model, a known tag whose
    // digest differs from the pinned one (a different artifact), a runtime-less row on a
    // one-runtime worker, and a name that slugifies into a runtime name.
    await report(w1, {
      name: 'mistral-nemo:12b-instruct-2407-q4_K_M',
      runtime: 'ollama',
      digest: fakeDigest('nemo'),
      size_bytes: 7_477_207_040,
    })
    await report(w2, {
      name: 'mistral-nemo:12b-instruct-2407-q4_K_M',
      runtime: 'ollama',
      digest: fakeDigest('nemo'),
    })
    await report(w2, { name: 'Qwen/Qwen2.5-14B-Instruct', runtime: 'vllm' })
    await makeCatalogEntry(t.deps, {
      id: 'pinned',
      runtime_model_id: 'pinned:1',
      digest: fakeDigest('pinned-a'),
    })
    await report(w2, { name: 'pinned:1', runtime: 'ollama', digest: fakeDigest('pinned-b') })
    await report(w1, { name: 'phi3:mini', runtime: null })
    await report(w2, { name: 'ollama/llama-vllm', runtime: 'ollama' })
    // Unusable: no runtime on a two-runtime worker; an engine gridkeep does not know.
    await report(w2, { name: 'mystery', runtime: null })
    await report(w1, { name: 'kobold-thing', runtime: 'koboldcpp' })
    return t
  }

  // The fleet's server configuration: its data directory and, in the PostgreSQL run, its database.
  const serverEnv = (t: TestApp) => ({
    DATA_DIR: t.config.DATA_DIR,
    ...(t.config.DATABASE_URL
      ? { DATABASE_URL: t.config.DATABASE_URL, JWT_SECRET: t.config.JWT_SECRET }
      : {}),
  })

  const MANIFEST = `# Our catalogue.\n# Keep this comment.\nmodels:\n  # the one we reviewed\n  - id: reviewed-model\n    task_type: chat\n    runtime: ollama\n    runtime_model_id: "reviewed:1"\n`

  test('appends staged stubs for uncovered models, keeps the text, passes check, and is idempotent', async () => {
    const t = await fleet()
    const path = write(MANIFEST)
    const env = serverEnv(t)
    const first = await run(['discover', '--manifest', path], env)
    expect(first.code).toBe(0)
    const text = readFileSync(path, 'utf8')
    expect(text.startsWith(MANIFEST)).toBe(true)

    const parsed = checkManifest(text)
    if (!parsed.ok) throw new Error(parsed.error)
    expect(parsed.violations).toEqual([])
    const stubs = parsed.entries.filter((e) => e.id !== 'reviewed-model')
    expect(stubs.map((s) => s.runtime_model_id).sort()).toEqual(
      [
        'Qwen/Qwen2.5-14B-Instruct',
        'mistral-nemo:12b-instruct-2407-q4_K_M',
        'ollama/llama-vllm',
        'phi3:mini',
        'pinned:1',
      ].sort(),
    )
    for (const s of stubs) {
      expect(s).toMatchObject({ enabled: false, status: 'unverified', task_type: null, quantization: null })
      expect(idViolations(s.id, null)).toEqual([])
    }
    const nemo = stubs.find((s) => s.runtime_model_id.startsWith('mistral-nemo'))!
    expect(nemo).toMatchObject({ runtime: 'ollama', digest: fakeDigest('nemo'), size_gb: 7.48 })
    expect(nemo.id).toBe('mistral-nemo-12b-instruct-2407-q4-k-m')
    expect(stubs.find((s) => s.runtime_model_id === 'phi3:mini')!.runtime).toBe('ollama')
    expect(stubs.find((s) => s.runtime_model_id === 'Qwen/Qwen2.5-14B-Instruct')!.runtime).toBe('vllm')
    // The same tag with another digest is another artifact: staged under a fresh id.
    expect(stubs.find((s) => s.runtime_model_id === 'pinned:1')!.id).not.toBe('pinned')
    // Runtime names are dropped from slugs (rule 3).
    expect(stubs.find((s) => s.runtime_model_id === 'ollama/llama-vllm')!.id).toBe('llama')
    expect(first.out[0]).toContain('appended 5 staged stub(s)')
    expect(first.err.join('\n')).toContain('"mystery"')
    expect(first.err.join('\n')).toContain('koboldcpp')

    const second = await run(['discover', `--manifest=${path}`], env)
    expect(second.code).toBe(0)
    expect(second.out[0]).toContain('nothing to append')
    expect(readFileSync(path, 'utf8')).toBe(text)

    // Seeded, the stubs are stored but hidden (enabled: false) until reviewed.
    const seeded = await applyManifest(t.deps, text, path)
    expect(seeded.skipped).toEqual([])
    const u = await makeUser(t)
    const listed = await t.req('GET', '/v1/models', { token: u.token })
    expect(listed.body.data.map((m: { id: string }) => m.id)).not.toContain(nemo.id)
    const stored = (await t.deps.store.catalogue.entry(nemo.id))!
    expect(stored).toMatchObject({ enabled: false, status: 'unverified', digest: fakeDigest('nemo') })
  })

  test('a model covered only by the manifest (not yet seeded) is not staged again', async () => {
    const t = await fleet()
    const covering = `${MANIFEST}  - id: nemo-reviewed\n    task_type: chat\n    digest: "${fakeDigest('nemo')}"\n    runtime: ollama\n    runtime_model_id: other-name\n`
    const path = write(covering)
    const r = await run(['discover', '--manifest', path], serverEnv(t))
    expect(r.code).toBe(0)
    expect(readFileSync(path, 'utf8')).not.toContain('mistral-nemo')
  })

  test('creates the manifest when it does not exist; refuses to append where models is not last', async () => {
    const t = await fleet()
    const env = serverEnv(t)
    const created = join(dir, 'new-manifest.yaml')
    expect((await run(['discover', '--manifest', created], env)).code).toBe(0)
    const parsed = checkManifest(readFileSync(created, 'utf8'))
    expect(parsed.ok && parsed.violations.length === 0 && parsed.entries.length === 5).toBe(true)

    const trailing = `${MANIFEST}other_key: 1\n`
    const path = write(trailing)
    const r = await run(['discover', '--manifest', path], env)
    expect(r.code).toBe(1)
    expect(readFileSync(path, 'utf8')).toBe(trailing)

    const broken = write('models: [oops\n')
    expect((await run(['discover', '--manifest', broken], env)).code).toBe(1)
    expect(readFileSync(broken, 'utf8')).toBe('models: [oops\n')
  })

  test('usage errors and a missing database exit 2', async () => {
    expect((await run(['discover', '--manifest'])).code).toBe(2)
    expect((await run(['discover', '--bogus'])).code).toBe(2)
    const r = await run(['discover', '--manifest', join(dir, 'x.yaml')], {
      DATA_DIR: join(dir, 'no-such-dir'),
    })
    expect(r.code).toBe(2)
    expect(r.err[0]).toContain('no database')
  })
})

describe('stub ids', () => {
  test('always satisfy rules 1–3 and never reuse a taken id', () => {
    const taken = new Set(['llama-3', 'model'])
    for (const name of [
      'llama3',
      'Llama 3',
      '',
      '---',
      'ollama',
      'vllm/openai',
      'tgi:latest',
      'v-llm',
      'llama-3',
    ]) {
      const id = stubId(name, null, taken)
      expect(idViolations(id, null)).toEqual([])
      expect(taken.has(id)).toBe(false)
      taken.add(id)
    }
  })
})
