import { expect, test } from 'bun:test'
import { Glob } from 'bun'

// docs/api.md §12, ARCHITECTURE.md rule 13: everything above the seam reaches the database through deps.store
// only, so every part works on both engines. The SQLite handles on Deps are for the SQLite engine
// and SQLite-only tools (backup, upgrade tests).
test('no module, service or HTTP plugin reads the SQLite handles directly', async () => {
  const offenders: string[] = []
  for (const dir of ['src/modules', 'src/services', 'src/http', 'src/app.ts', 'src/index.ts']) {
    const glob = new Glob(dir.endsWith('.ts') ? dir : `${dir}/**/*.ts`)
    for await (const path of glob.scan('.')) {
      const text = await Bun.file(path).text()
      if (/deps\.(db|sqlite)\b|writeTx\(|from '\.\.\/\.\.\/db\/tx'/.test(text)) offenders.push(path)
    }
  }
  expect(offenders).toEqual([])
})
