import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { asc, eq } from 'drizzle-orm'
import { createServer } from '../../src/compose'
import { startServer } from '../../src/index'
import { manualClock } from '../../src/lib/clock'
import { applyManifest, seedCatalogue } from '../../src/modules/catalogue/seed'
import {
  buildRequest,
  capturingMailer,
  cheapPasswords,
  makeTestApp,
  readRes,
  type TestApp,
  testConfig,
} from '../helpers/app'
import { makeUser } from '../helpers/builders'
import { fakeDigest } from '../helpers/catalogue'
import { rowsOf } from '../helpers/rows'
import { capturedLogLines } from '../helpers/secrets'

// docs/api.md §4 catalogue rules 4, 5 and 7: the manifest is upserted at every start; bad entries are logged with the
// rule they break and skipped; renames move the row and its children in place.

const apps: TestApp[] = []
const fresh = () => {
  const t = makeTestApp()
  apps.push(t)
  return t
}
afterAll(() => {
  for (const t of apps) t.close()
})

const entry = (id: string, extra = '') =>
  `  - id: ${id}\n    task_type: chat\n    runtime: ollama\n    runtime_model_id: "${id}:latest"\n${extra}`
const manifest = (...entries: string[]) => `models:\n${entries.join('\n')}\n`

const row = (t: TestApp, id: string) => t.deps.store.catalogue.entry(id)
const ids = async (t: TestApp) => {
  const { db, tables } = rowsOf(t.deps)
  const rows = await db.select({ id: tables.catalogEntries.id }).from(tables.catalogEntries)
  return rows.map((r) => r.id).sort()
}
const profiles = (t: TestApp, id: string) => {
  const { db, tables } = rowsOf(t.deps)
  const p = tables.servingProfiles
  return db.select().from(p).where(eq(p.catalog_id, id)).orderBy(asc(p.runtime))
}
const files = (t: TestApp, id: string) => {
  const { db, tables } = rowsOf(t.deps)
  const f = tables.artifactFiles
  return db.select().from(f).where(eq(f.catalog_id, id)).orderBy(asc(f.path))
}
const logRecords = (msg: string) =>
  capturedLogLines()
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((r) => r.msg === msg)

describe('rules 1–3 at seed time: logged with the rule, skipped, seeding continues', () => {
  test.each([
    ['Bad_Case', 1],
    ['llama-3-1-8b-q80', 2],
    ['llama-ollama', 3],
  ] as const)('%p (rule %p)', async (badId, rule) => {
    const t = fresh()
    const source = `test-rule-${rule}`
    const quant = rule === 2 ? '    quantization: Q4_K_M\n' : ''
    const report = await applyManifest(
      t.deps,
      manifest(entry('before'), entry(badId, quant), entry('after')),
      source,
    )
    expect(report.applied).toBe(true)
    expect(report.inserted).toEqual(['before', 'after'])
    expect(await ids(t)).toEqual(['after', 'before'])
    const logged = logRecords('catalogue entry skipped').filter((r) => r.source === source)
    expect(logged).toEqual([expect.objectContaining({ level: 'warn', id: badId, rule, index: 1 })])
  })

  test('a malformed entry is logged as a schema violation and skipped', async () => {
    const t = fresh()
    const report = await applyManifest(
      t.deps,
      manifest(entry('ok'), entry('typo', '    vram: 4\n')),
      'test-schema',
    )
    expect(report.inserted).toEqual(['ok'])
    expect(report.skipped).toEqual([expect.objectContaining({ id: 'typo', rule: 'schema' })])
    expect(
      logRecords('catalogue entry skipped').some((r) => r.source === 'test-schema' && r.rule === 'schema'),
    ).toBe(true)
  })

  test('an entry is never skipped for its params: an Ollama entry with num_ctx is seeded; a param in error is logged and left out', async () => {
    const t = fresh()
    const report = await applyManifest(
      t.deps,
      manifest(
        '  - id: qwen-ctx\n    task_type: chat\n    serving_profiles:\n' +
          '      - { runtime: ollama, runtime_model_id: "qwen2.5:7b", params: { num_ctx: 8192, keep_alive: 1h } }',
        '  - id: bad-params\n    task_type: chat\n    serving_profiles:\n' +
          '      - { runtime: vllm, runtime_model_id: org/m, params: { max_model_length: 8192, max_num_seqs: "many" } }',
      ),
      'test-params',
    )
    expect(report.inserted).toEqual(['qwen-ctx', 'bad-params'])
    expect(report.skipped).toEqual([])
    expect(await ids(t)).toEqual(['bad-params', 'qwen-ctx'])
    expect((await profiles(t, 'qwen-ctx')).map((p) => p.params)).toEqual([
      { num_ctx: 8192, keep_alive: '1h' },
    ])
    expect((await profiles(t, 'bad-params')).map((p) => p.params)).toEqual([{ max_model_length: 8192 }])
    const said = capturedLogLines()
      .map((l) => JSON.parse(l))
      .filter((r) => r.source === 'test-params' && r.msg.startsWith('catalogue param'))
    expect(said.map((r) => [r.level, r.msg, r.id, r.message])).toEqual([
      [
        'warn',
        'catalogue param kept though unknown',
        'bad-params',
        '/serving_profiles/0/params (vllm): param "max_model_length" is not a vllm setting gridkeep knows (did you mean "max_model_len"?); it is passed to the engine as written',
      ],
      [
        'error',
        'catalogue param left out',
        'bad-params',
        '/serving_profiles/0/params (vllm): param "max_num_seqs" must be an integer (got "many"); left out',
      ],
    ])
  })

  test('a manifest that is not YAML logs an error and keeps the stored catalogue', async () => {
    const t = fresh()
    await applyManifest(t.deps, manifest(entry('kept')), 'good')
    const report = await applyManifest(t.deps, 'models: [unclosed\n  - : :', 'test-broken-yaml')
    expect(report.applied).toBe(false)
    expect(report.error).toContain('not valid YAML')
    expect(await ids(t)).toEqual(['kept'])
    expect(
      logRecords('catalogue manifest unusable; stored catalogue kept').some(
        (r) => r.source === 'test-broken-yaml',
      ),
    ).toBe(true)
  })
})

describe('upsert (rule 7)', () => {
  test('new ids are inserted, managed fields of existing ids updated, absent entries untouched', async () => {
    const t = fresh()
    await applyManifest(t.deps, manifest(entry('a', '    vram_gb: 8\n'), entry('b')), 'v1')
    const createdA = (await row(t, 'a'))!.created_at
    t.clock.advance(60)
    const report = await applyManifest(
      t.deps,
      manifest(entry('a', '    vram_gb: 12\n    display_name: Model A\n'), entry('c')),
      'v2',
    )
    expect(report.inserted).toEqual(['c'])
    expect(report.updated).toEqual(['a'])
    expect(await ids(t)).toEqual(['a', 'b', 'c'])
    const a = (await row(t, 'a'))!
    expect(a.vram_gb).toBe(12)
    expect(a.display_name).toBe('Model A')
    expect(a.created_at).toBe(createdA)
    expect(a.updated_at).toBe(createdA + 60)
    // b is absent from v2: left exactly as it was, still enabled.
    expect(await row(t, 'b')).toMatchObject({
      enabled: true,
      runtime_model_id: 'b:latest',
      updated_at: createdA,
    })
  })

  test('a field removed from the manifest is cleared (every stated field is managed)', async () => {
    const t = fresh()
    await applyManifest(t.deps, manifest(entry('a', '    lineage: org/base\n    vram_gb: 8\n')), 'v1')
    await applyManifest(t.deps, manifest(entry('a')), 'v2')
    expect(await row(t, 'a')).toMatchObject({ lineage: null, vram_gb: null })
  })

  test('reseeding an unchanged manifest changes nothing', async () => {
    const t = fresh()
    const text = manifest(entry('a', '    capabilities: { json_mode: true, logprobs: true }\n'))
    await applyManifest(t.deps, text, 'v1')
    const before = await row(t, 'a')
    t.clock.advance(60)
    const report = await applyManifest(t.deps, text, 'v1-again')
    expect(report.unchanged).toEqual(['a'])
    expect(report.updated).toEqual([])
    expect(await row(t, 'a')).toEqual(before!)
  })

  test('enabled: false entries are stored (hidden elsewhere), and can be enabled later', async () => {
    const t = fresh()
    await applyManifest(
      t.deps,
      manifest(entry('staged', '    enabled: false\n    status: unverified\n')),
      'v1',
    )
    expect(await row(t, 'staged')).toMatchObject({ enabled: false, status: 'unverified' })
    await applyManifest(t.deps, manifest(entry('staged')), 'v2')
    expect(await row(t, 'staged')).toMatchObject({ enabled: true, status: 'active' })
  })
})

describe('rename (rule 5)', () => {
  test('the row and its child rows are updated in place; stored batches keep the old slug', async () => {
    const t = fresh()
    const sha = fakeDigest('weights')
    const fileRows = `    artifact_files:\n      - { path: w.gguf, sha256: "${sha}" }\n`
    const profs =
      '    serving_profiles:\n      - { runtime: ollama, runtime_model_id: "m:1" }\n      - { runtime: llama.cpp, runtime_model_id: m1 }\n'
    await applyManifest(t.deps, manifest(`  - id: old-slug\n    task_type: chat\n${profs}${fileRows}`), 'v1')
    const old = (await row(t, 'old-slug'))!
    const oldProfiles = await profiles(t, 'old-slug')
    const u = await makeUser(t)
    const { db, tables } = rowsOf(t.deps)
    await db.insert(tables.batches).values({
      id: 'batch_renamecase',
      user_id: u.id,
      input_file_id: 'file-x',
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
      model: 'old-slug',
      status: 'validated',
      created_at: 1,
      updated_at: 1,
    })

    const report = await applyManifest(
      t.deps,
      manifest(`  - id: new-slug\n    renamed_from: old-slug\n    task_type: chat\n${profs}${fileRows}`),
      'v2',
    )
    expect(report.renamed).toEqual([{ from: 'old-slug', to: 'new-slug' }])
    expect(report.inserted).toEqual([])
    expect(await ids(t)).toEqual(['new-slug'])
    const renamed = (await row(t, 'new-slug'))!
    expect(renamed.seq).toBe(old.seq)
    expect(renamed.created_at).toBe(old.created_at)
    expect(renamed.renamed_from).toBe('old-slug')
    // Children followed through ON UPDATE CASCADE: same rows, new parent id.
    expect((await profiles(t, 'new-slug')).map((p) => p.seq)).toEqual(oldProfiles.map((p) => p.seq))
    expect(await profiles(t, 'old-slug')).toEqual([])
    expect((await files(t, 'new-slug')).map((f) => f.sha256)).toEqual([sha])
    const batch = (await t.deps.store.batches.get('batch_renamecase', null))!
    expect(batch.model).toBe('old-slug')

    // One-shot: the same manifest at the next start is a plain (no-op) update.
    const again = await applyManifest(
      t.deps,
      manifest(`  - id: new-slug\n    renamed_from: old-slug\n    task_type: chat\n${profs}${fileRows}`),
      'v2-again',
    )
    expect(again.renamed).toEqual([])
    expect(again.unchanged).toEqual(['new-slug'])
  })

  test('renamed_from naming no stored entry: the entry is inserted as new', async () => {
    const t = fresh()
    const report = await applyManifest(
      t.deps,
      manifest(entry('fresh-id', '    renamed_from: never-existed\n')),
      'v1',
    )
    expect(report.inserted).toEqual(['fresh-id'])
    expect(report.renamed).toEqual([])
    expect((await row(t, 'fresh-id'))!.renamed_from).toBe('never-existed')
  })

  test('when both ids already exist the old one is left untouched and a note is logged', async () => {
    const t = fresh()
    await applyManifest(t.deps, manifest(entry('old-id', '    vram_gb: 4\n'), entry('new-id')), 'v1')
    const oldBefore = await row(t, 'old-id')
    const report = await applyManifest(
      t.deps,
      manifest(entry('new-id', '    renamed_from: old-id\n    vram_gb: 9\n')),
      'test-rename-both',
    )
    expect(report.renamed).toEqual([])
    expect(report.updated).toEqual(['new-id'])
    expect(report.notes).toEqual([{ id: 'new-id', message: expect.stringContaining('left untouched') }])
    expect(await row(t, 'old-id')).toEqual(oldBefore!)
    expect((await row(t, 'new-id'))!.vram_gb).toBe(9)
    expect(logRecords('catalogue rename not applied').some((r) => r.source === 'test-rename-both')).toBe(true)
  })
})

describe('serving profiles', () => {
  test('derived from runtime/runtime_model_id when none is given (derived: true)', async () => {
    const t = fresh()
    await applyManifest(t.deps, manifest(entry('a')), 'v1')
    expect(await profiles(t, 'a')).toEqual([
      expect.objectContaining({ runtime: 'ollama', runtime_model_id: 'a:latest', derived: true, params: {} }),
    ])
    // The derived profile follows its source fields.
    await applyManifest(
      t.deps,
      manifest('  - id: a\n    task_type: chat\n    runtime: vllm\n    runtime_model_id: org/a'),
      'v2',
    )
    expect(await profiles(t, 'a')).toEqual([
      expect.objectContaining({ runtime: 'vllm', runtime_model_id: 'org/a', derived: true }),
    ])
  })

  test('adding a runtime adds a profile, never an entry; removing one removes the profile', async () => {
    const t = fresh()
    const one =
      '  - id: a\n    task_type: chat\n    serving_profiles:\n      - { runtime: ollama, runtime_model_id: "a:1" }'
    await applyManifest(t.deps, manifest(one), 'v1')
    const firstSeq = (await profiles(t, 'a'))[0]!.seq
    const two = `${one}\n      - { runtime: llama.cpp, runtime_model_id: a1, params: { ctx_size: 4096 } }`
    const report = await applyManifest(t.deps, manifest(two), 'v2')
    expect(report.updated).toEqual(['a'])
    expect(await ids(t)).toEqual(['a'])
    expect(await profiles(t, 'a')).toEqual([
      expect.objectContaining({
        runtime: 'llama.cpp',
        runtime_model_id: 'a1',
        params: { ctx_size: 4096 },
        derived: false,
      }),
      expect.objectContaining({ seq: firstSeq, runtime: 'ollama', runtime_model_id: 'a:1', derived: false }),
    ])
    // The deprecated columns are still written (docs/api.md §0).
    expect(await row(t, 'a')).toMatchObject({ runtime: 'ollama', runtime_model_id: 'a:1' })
    await applyManifest(t.deps, manifest(one), 'v3')
    expect((await profiles(t, 'a')).map((p) => p.runtime)).toEqual(['ollama'])
  })

  test('the database refuses a second profile for the same (entry, runtime)', async () => {
    const t = fresh()
    await applyManifest(t.deps, manifest(entry('a')), 'v1')
    const { db, tables } = rowsOf(t.deps)
    const duplicate = db
      .insert(tables.servingProfiles)
      .values({ catalog_id: 'a', runtime: 'ollama', runtime_model_id: 'x' })
    await expect(Promise.resolve(duplicate)).rejects.toThrow()
  })
})

describe('artifact files and digests', () => {
  test('artifact file rows are stored normalized, updated and removed with the manifest', async () => {
    const t = fresh()
    const w = fakeDigest('w')
    const p = fakeDigest('p')
    const v1 = `    digest: "SHA256:${w.toUpperCase()}"\n    artifact_files:\n      - { path: model.gguf, sha256: "sha256:${w.toUpperCase()}", size_bytes: 100 }\n      - { path: mmproj.gguf, sha256: "${p}", size_bytes: 10 }\n`
    await applyManifest(t.deps, manifest(entry('vis', v1)), 'v1')
    expect((await row(t, 'vis'))!.digest).toBe(w)
    expect(
      (await files(t, 'vis')).map(({ path, sha256, size_bytes }) => ({ path, sha256, size_bytes })),
    ).toEqual([
      { path: 'mmproj.gguf', sha256: p, size_bytes: 10 },
      { path: 'model.gguf', sha256: w, size_bytes: 100 },
    ])
    const p2 = fakeDigest('p2')
    const v2 = `    artifact_files:\n      - { path: mmproj.gguf, sha256: "${p2}" }\n`
    await applyManifest(t.deps, manifest(entry('vis', v2)), 'v2')
    expect(
      (await files(t, 'vis')).map(({ path, sha256, size_bytes }) => ({ path, sha256, size_bytes })),
    ).toEqual([{ path: 'mmproj.gguf', sha256: p2, size_bytes: null }])
    expect((await row(t, 'vis'))!.digest).toBeNull()
  })

  test('an entry with a malformed digest is skipped, not stored half-valid', async () => {
    const t = fresh()
    const report = await applyManifest(
      t.deps,
      manifest(entry('bad-pin', '    digest: "sha256:1234"\n')),
      'v1',
    )
    expect(report.inserted).toEqual([])
    expect(report.skipped[0]!.message).toContain('/digest')
    expect(await row(t, 'bad-pin')).toBeUndefined()
  })
})

describe('the manifest file at start (CATALOGUE_PATH, default, embedded copy)', () => {
  test('a manifest edit has no effect until the next start; then it is applied', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gridkeep-catalogue-'))
    const path = join(dir, 'models.yaml')
    writeFileSync(path, manifest(entry('first', '    vram_gb: 4\n')))
    const config = testConfig({ DATA_DIR: join(dir, 'data'), CATALOGUE_PATH: path })
    const start = () =>
      startServer(
        config,
        createServer(config, {
          clock: manualClock(),
          mailer: capturingMailer(),
          passwords: cheapPasswords(),
        }),
      )
    const listIds = async (url: string, token: string) => {
      const res = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${token}` } })
      return ((await res.json()) as { data: { id: string; vram_gb: number | null }[] }).data
    }
    try {
      let running = await start()
      const u = await makeUser({
        deps: running.deps,
        req: async (method, p, o) => readRes(await fetch(buildRequest(running.url, method, p, o))),
      })
      expect(await listIds(running.url, u.token)).toEqual([
        expect.objectContaining({ id: 'first', vram_gb: 4 }),
      ])

      writeFileSync(path, manifest(entry('first', '    vram_gb: 6\n'), entry('second')))
      expect(await listIds(running.url, u.token)).toEqual([
        expect.objectContaining({ id: 'first', vram_gb: 4 }),
      ])
      await running.stop()

      running = await start()
      expect((await listIds(running.url, u.token)).map((m) => [m.id, m.vram_gb])).toEqual([
        ['first', 6],
        ['second', null],
      ])
      await running.stop()

      // A broken manifest at the next start: the server still starts and keeps what it had.
      writeFileSync(path, 'models: [oops\n  - : :\n')
      running = await start()
      expect((await listIds(running.url, u.token)).map((m) => m.id)).toEqual(['first', 'second'])
      await running.stop()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('an explicit CATALOGUE_PATH that does not exist keeps the stored catalogue', async () => {
    const t = makeTestApp({ CATALOGUE_PATH: '/nonexistent/gridkeep/models.yaml' })
    apps.push(t)
    await applyManifest(t.deps, manifest(entry('kept')), 'v1')
    const report = await seedCatalogue(t.deps)
    expect(report).toMatchObject({
      applied: false,
      source: '/nonexistent/gridkeep/models.yaml',
      error: 'file not found',
    })
    expect(await ids(t)).toEqual(['kept'])
  })

  test('without CATALOGUE_PATH: catalogue/models.yaml of the working directory, else the embedded copy', async () => {
    const t = fresh()
    const fromCwd = await seedCatalogue(t.deps)
    expect(fromCwd.source).toBe('catalogue/models.yaml')
    expect(fromCwd.skipped).toEqual([])
    const shipped = await ids(t)
    expect(shipped.length).toBeGreaterThanOrEqual(10)

    const empty = mkdtempSync(join(tmpdir(), 'gridkeep-nocat-'))
    const cwd = process.cwd()
    const t2 = fresh()
    try {
      process.chdir(empty)
      const embedded = await seedCatalogue(t2.deps)
      expect(embedded.source).toBe('embedded')
      expect(embedded.inserted.sort()).toEqual(shipped)
    } finally {
      process.chdir(cwd)
      rmSync(empty, { recursive: true, force: true })
    }
  })
})
