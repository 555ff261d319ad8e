// The PostgreSQL twin of src/db/schema (docs/api.md §12): the same tables, columns and indexes, in
// PostgreSQL's types (bigint seconds, boolean, jsonb, double precision). Row types come from the
// SQLite schema; a test checks that both schemas name the same columns.

export * from './accounts'
export * from './batches'
export * from './catalogue'
export * from './maintenance'
export * from './sso'
export * from './webhooks'
export * from './workers'
