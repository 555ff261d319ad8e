import { defineConfig } from 'drizzle-kit'

// PostgreSQL migrations (API.md §12); drizzle.config.ts is SQLite's.
export default defineConfig({
  dialect: 'postgresql',
  schema: './src/db/pg/schema/index.ts',
  out: './drizzle/postgres',
})
