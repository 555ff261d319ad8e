import { afterEach, expect, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { manifestEntry } from '../helpers/catalogue'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// The catalogue's verbs behave the same on SQLite and on PostgreSQL (docs/api.md §12).

const sha = (s: string) => new Bun.CryptoHasher('sha256').update(s).digest('hex')

const entry = manifestEntry

const children = async (h: StoreHarness, table: string) =>
  (
    await h.all<{ catalog_id: string; k: string }>(
      `SELECT catalog_id, ${table === 'serving_profiles' ? 'runtime' : 'path'} AS k FROM ${table} ORDER BY seq`,
    )
  ).map((r) => `${r.catalog_id}/${r.k}`)

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} catalogue`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('upsertEntries: inserted, then unchanged, then updated when a managed field or a child row changes', async () => {
      h = await open()
      const cat = h.store.catalogue
      expect(await cat.upsertEntries([entry('a'), entry('b')], 10, SYSTEM_AUDIT)).toEqual([
        { result: 'inserted', renamedFrom: undefined, note: undefined },
        { result: 'inserted', renamedFrom: undefined, note: undefined },
      ])
      expect(await cat.entry('a')).toMatchObject({
        id: 'a',
        quantization: 'Q4_K_M',
        capabilities: { tools: true },
        enabled: true,
        created_at: 10,
        updated_at: 10,
      })
      expect((await cat.upsertEntries([entry('a')], 20, SYSTEM_AUDIT)).map((o) => o.result)).toEqual([
        'unchanged',
      ])
      expect((await cat.entry('a'))?.updated_at).toBe(10)
      // A field dropped from the manifest is cleared; JSON key order does not count as a change.
      expect(
        (await cat.upsertEntries([entry('a', { quantization: null })], 30, SYSTEM_AUDIT))[0]!.result,
      ).toBe('updated')
      expect(await cat.entry('a')).toMatchObject({ quantization: null, updated_at: 30 })
      const profiles = [
        { runtime: 'vllm' as const, runtime_model_id: 'org/a', params: { b: 1, a: 2 }, derived: false },
        { runtime: 'ollama' as const, runtime_model_id: 'a:latest', params: {}, derived: false },
      ]
      const files = [{ path: 'a.safetensors', sha256: sha('a'), size_bytes: 5 }]
      const withChildren = entry('a', {
        quantization: null,
        serving_profiles: profiles,
        artifact_files: files,
      })
      expect((await cat.upsertEntries([withChildren], 40, SYSTEM_AUDIT))[0]!.result).toBe('updated')
      // The ollama profile is updated in place (same row); vllm is added.
      expect(await children(h, 'serving_profiles')).toEqual(['a/ollama', 'b/ollama', 'a/vllm'])
      expect(await children(h, 'artifact_files')).toEqual(['a/a.safetensors'])
      const reordered = {
        ...withChildren,
        serving_profiles: [{ ...profiles[0]!, params: { a: 2, b: 1 } }, profiles[1]!],
      }
      expect((await cat.upsertEntries([reordered], 50, SYSTEM_AUDIT))[0]!.result).toBe('unchanged')
      // Removing a profile or a file removes its row, and touches the entry.
      const fewer = entry('a', { quantization: null, serving_profiles: [profiles[0]!] })
      expect((await cat.upsertEntries([fewer], 60, SYSTEM_AUDIT))[0]!.result).toBe('updated')
      expect(await children(h, 'serving_profiles')).toEqual(['b/ollama', 'a/vllm'])
      expect(await children(h, 'artifact_files')).toEqual([])
      expect((await cat.entry('a'))?.updated_at).toBe(60)
    })

    test('upsertEntries: a one-shot rename moves the row and its child rows; both ids present → a note', async () => {
      h = await open()
      const cat = h.store.catalogue
      const files = [{ path: 'w.gguf', sha256: sha('w'), size_bytes: null }]
      await cat.upsertEntries([entry('old', { artifact_files: files }), entry('other')], 10, SYSTEM_AUDIT)
      const seq = (await cat.entry('old'))!.seq
      const renamed = entry('new', { renamed_from: 'old', artifact_files: files })
      expect(await cat.upsertEntries([renamed], 20, SYSTEM_AUDIT)).toEqual([
        { result: 'updated', renamedFrom: 'old', note: undefined },
      ])
      expect(await cat.entry('old')).toBeUndefined()
      expect(await cat.entry('new')).toMatchObject({ seq, renamed_from: 'old', created_at: 10 })
      expect(await children(h, 'artifact_files')).toEqual(['new/w.gguf'])
      // Seeding again: the rename already happened; nothing to do.
      expect((await cat.upsertEntries([renamed], 30, SYSTEM_AUDIT))[0]).toEqual({
        result: 'unchanged',
        renamedFrom: undefined,
        note: undefined,
      })
      const clash = await cat.upsertEntries(
        [entry('other2'), entry('other2', { renamed_from: 'other' })],
        40,
        SYSTEM_AUDIT,
      )
      expect(clash[1]!.note).toContain('"other" was left untouched')
      expect(await cat.entry('other')).toBeDefined()
    })

    test('readCatalogue: entries, profiles and artifact files in seq order', async () => {
      h = await open()
      await h.store.catalogue.upsertEntries(
        [
          entry('b', {
            artifact_files: [
              { path: 'f', sha256: sha('f'), size_bytes: 1 },
              { path: 'e/mmproj.gguf', sha256: sha('e'), size_bytes: null },
            ],
            source_type: 'huggingface',
            source_ref: 'owner/b-gguf',
            source_revision: 'v1',
          }),
          entry('a', { enabled: false, org_id: 'org_x', digest: sha('a') }),
        ],
        10,
        SYSTEM_AUDIT,
      )
      const rows = await h.store.catalogue.readCatalogue()
      expect(rows.entries.map((e) => [e.id, e.enabled, e.org_id, e.digest])).toEqual([
        ['b', true, null, null],
        ['a', false, 'org_x', sha('a')],
      ])
      expect(rows.entries[0]).toMatchObject({
        vram_gb: 8,
        size_gb: 5,
        runtime: 'ollama',
        runtime_model_id: 'b:latest',
        source_type: 'huggingface',
        source_ref: 'owner/b-gguf',
        source_revision: 'v1',
      })
      expect(rows.profiles).toEqual([
        { catalog_id: 'b', runtime: 'ollama', runtime_model_id: 'b:latest', params: {} },
        { catalog_id: 'a', runtime: 'ollama', runtime_model_id: 'a:latest', params: {} },
      ])
      // A download fetches the files in manifest order (docs/api.md §7 pull_models).
      expect(rows.artifacts).toEqual([
        { catalog_id: 'b', path: 'f', sha256: sha('f'), size_bytes: 1 },
        { catalog_id: 'b', path: 'e/mmproj.gguf', sha256: sha('e'), size_bytes: null },
      ])
    })

    test('enabledEntries: every enabled entry, private ones included, in byte order of id', async () => {
      h = await open()
      await h.store.catalogue.upsertEntries(
        [
          entry('z-public'),
          entry('a-mine', { org_id: 'org_a' }),
          entry('m-theirs', { org_id: 'org_b' }),
          entry('off', { enabled: false }),
          entry('a.dot'),
        ],
        10,
        SYSTEM_AUDIT,
      )
      // Byte order on both engines.
      const rows = await h.store.catalogue.enabledEntries()
      expect(rows.map((e) => [e.id, e.org_id])).toEqual([
        ['a-mine', 'org_a'],
        ['a.dot', null],
        ['m-theirs', 'org_b'],
        ['z-public', null],
      ])
      expect(rows[0]).toMatchObject({ enabled: true, vram_gb: 8, runtime_model_id: 'a-mine:latest' })
    })
  })
}
