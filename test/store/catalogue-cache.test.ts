import { afterEach, expect, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { manifestEntry } from '../helpers/catalogue'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// readCatalogue runs on every poll: each engine keeps the rows until the catalogue changes through
// it (upsertEntries), until another instance says it changed it (forgetCatalogue, on its
// `models_changed` signal, scope `catalogue`), or for at most CATALOGUE_REREAD_MS.

const entry = (id: string) => manifestEntry(id, { capabilities: {} })

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} catalogue cache`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('the same rows until upsertEntries or forgetCatalogue; then the database again', async () => {
      h = await open()
      await h.store.catalogue.upsertEntries([entry('a')], 1, SYSTEM_AUDIT)
      const first = await h.store.catalogue.readCatalogue()
      expect(first.entries.map((e) => e.id)).toEqual(['a'])
      expect(await h.store.catalogue.readCatalogue()).toBe(first)

      // Through this engine: seen at once.
      await h.store.catalogue.upsertEntries([entry('b')], 2, SYSTEM_AUDIT)
      const second = await h.store.catalogue.readCatalogue()
      expect(second.entries.map((e) => e.id)).toEqual(['a', 'b'])

      // Behind its back (another instance): the cached rows until it is told.
      await h.exec(
        `INSERT INTO catalog_entries (id, display_name, created_at, updated_at) VALUES ('c', 'C', 3, 3)`,
      )
      expect(await h.store.catalogue.readCatalogue()).toBe(second)
      h.store.catalogue.forgetCatalogue()
      expect((await h.store.catalogue.readCatalogue()).entries.map((e) => e.id)).toEqual(['a', 'b', 'c'])
    })

    test('a read that began before a change is not kept', async () => {
      h = await open()
      await h.store.catalogue.upsertEntries([entry('a')], 1, SYSTEM_AUDIT)
      h.store.catalogue.forgetCatalogue()
      const before = h.store.catalogue.readCatalogue()
      h.store.catalogue.forgetCatalogue()
      await before
      await h.exec(
        `INSERT INTO catalog_entries (id, display_name, created_at, updated_at) VALUES ('b', 'B', 2, 2)`,
      )
      expect((await h.store.catalogue.readCatalogue()).entries.map((e) => e.id)).toEqual(['a', 'b'])
    })
  })
}
