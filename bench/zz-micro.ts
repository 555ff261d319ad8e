import { benchServer } from './lib/fixture'

const gk = await benchServer({ LOG_LEVEL: 'warn' })
const N = 100_000
if (process.argv[2]) gk.deps.sqlite.exec(process.argv[2])
let t = performance.now()
for (let i = 0; i < N; i++) await gk.deps.store.accounts.findUserById(gk.userId)
console.log('findUserById µs', ((performance.now() - t) * 1000) / N)
const raw = gk.deps.sqlite.prepare('select * from users where id = ?')
t = performance.now()
for (let i = 0; i < N; i++) raw.get(gk.userId)
console.log('raw get µs', ((performance.now() - t) * 1000) / N)
const raw2 = gk.deps.sqlite.prepare('select * from users where id = ?')
t = performance.now()
for (let i = 0; i < N; i++) raw2.values(gk.userId)
console.log('raw values µs', ((performance.now() - t) * 1000) / N)
console.log(gk.deps.sqlite.query('pragma journal_mode').get(), gk.deps.sqlite.query('pragma mmap_size').get())
await gk.stop()
process.exit(0)
