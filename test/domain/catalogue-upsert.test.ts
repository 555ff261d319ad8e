import { describe, expect, test } from 'bun:test'
import type { ArtifactFileRow, CatalogEntryRow, ServingProfileRow } from '../../src/db/schema'
import { childrenPlan, entryRowPlan, managedFields } from '../../src/domain/catalogue-upsert'
import { manifestEntry } from '../helpers/catalogue'

const stored = (id: string, seq: number, o: Partial<CatalogEntryRow> = {}): CatalogEntryRow => {
  const e = manifestEntry(id)
  return { seq, id, ...managedFields(e), created_at: 1, updated_at: 1, ...o } as CatalogEntryRow
}
const profileRow = (seq: number, catalog_id: string, o: Partial<ServingProfileRow> = {}): ServingProfileRow =>
  ({
    seq,
    catalog_id,
    runtime: 'ollama',
    runtime_model_id: `${catalog_id}:latest`,
    params: {},
    derived: true,
    ...o,
  }) as ServingProfileRow
const fileRow = (seq: number, catalog_id: string, path: string, sha256: string): ArtifactFileRow =>
  ({ seq, catalog_id, path, sha256, size_bytes: 10 }) as ArtifactFileRow

describe('entryRowPlan', () => {
  test('a new id is inserted with every managed field, created and updated now', () => {
    const e = manifestEntry('m')
    expect(entryRowPlan(e, undefined, undefined, 50)).toEqual({
      rename: null,
      write: { kind: 'insert', values: { id: 'm', ...managedFields(e), created_at: 50, updated_at: 50 } },
      result: 'inserted',
    })
  })

  test('a stored row that matches is left alone; one that differs is updated', () => {
    const e = manifestEntry('m')
    expect(entryRowPlan(e, stored('m', 1), undefined, 50)).toEqual({
      rename: null,
      write: null,
      result: 'unchanged',
    })
    const changed = entryRowPlan(e, stored('m', 1, { display_name: 'Old' }), undefined, 50)
    expect(changed).toEqual({
      rename: null,
      write: { kind: 'update', set: { ...managedFields(e), updated_at: 50 } },
      result: 'updated',
    })
  })

  test('JSON key order does not count as a change', () => {
    const e = manifestEntry('m', { capabilities: { a: true, b: false } })
    expect(
      entryRowPlan(e, stored('m', 1, { capabilities: { b: false, a: true } }), undefined, 5).write,
    ).toBeNull()
  })

  test('renamed_from: the old row is renamed when the new id is free, and counts as updated', () => {
    const e = manifestEntry('new', { renamed_from: 'old' })
    // Stored under the old id with the fields the manifest now states: only the id changes.
    const old = { ...stored('new', 7, { renamed_from: 'old' }), id: 'old' }
    const plan = entryRowPlan(e, undefined, old, 50)
    expect(plan.rename).toBe(old)
    expect(plan.result).toBe('updated')
    expect(plan.write).toBeNull()
    // And its managed fields updated when they differ too.
    const stale = { ...old, display_name: 'Old name' }
    expect(entryRowPlan(e, undefined, stale, 50).write).toEqual({
      kind: 'update',
      set: { ...managedFields(e), updated_at: 50 },
    })
  })

  test('renamed_from with both ids stored: nothing renamed, a note says so', () => {
    const e = manifestEntry('new', { renamed_from: 'old' })
    const plan = entryRowPlan(e, stored('new', 2, { renamed_from: 'old' }), stored('old', 1), 50)
    expect(plan.rename).toBeNull()
    expect(plan.note).toContain('"old" was left untouched')
    expect(plan.result).toBe('unchanged')
  })
})

describe('childrenPlan', () => {
  test('profiles and files brought to the manifest; only children changed → touch, updated', () => {
    const e = manifestEntry('m', {
      serving_profiles: [
        { runtime: 'ollama', runtime_model_id: 'm:v2', params: {}, derived: false },
        { runtime: 'vllm', runtime_model_id: 'org/m', params: { x: 1 }, derived: false },
      ],
      artifact_files: [
        { path: 'a', sha256: 'aa', size_bytes: 10 },
        { path: 'c', sha256: 'cc', size_bytes: null },
      ],
    })
    const plan = childrenPlan(
      e,
      [profileRow(1, 'm'), profileRow(2, 'm', { runtime: 'sglang' })],
      [fileRow(3, 'm', 'a', 'aa'), fileRow(4, 'm', 'b', 'bb')],
      'unchanged',
    )
    expect(plan).toEqual({
      profiles: {
        deletes: [2],
        updates: [{ seq: 1, set: { runtime_model_id: 'm:v2', params: {}, derived: false } }],
        inserts: [
          { catalog_id: 'm', runtime: 'vllm', runtime_model_id: 'org/m', params: { x: 1 }, derived: false },
        ],
      },
      files: {
        deletes: [4],
        updates: [],
        inserts: [{ catalog_id: 'm', path: 'c', sha256: 'cc', size_bytes: null }],
      },
      touch: true,
      result: 'updated',
    })
  })

  test('children as stored: nothing to do, the row result stands', () => {
    const e = manifestEntry('m')
    const plan = childrenPlan(e, [profileRow(1, 'm')], [], 'unchanged')
    expect(plan.touch).toBe(false)
    expect(plan.result).toBe('unchanged')
    expect(plan.profiles).toEqual({ deletes: [], updates: [], inserts: [] })
  })

  test('a row already written is not touched again for its children', () => {
    const plan = childrenPlan(manifestEntry('m'), [], [], 'inserted')
    expect(plan.profiles.inserts).toHaveLength(1)
    expect(plan.touch).toBe(false)
    expect(plan.result).toBe('inserted')
  })
})
