// The fields of a batch input line (docs/api.md §6 "Batch input line"): anything else on a line is an
// unknown field; and the endpoints a batch may name. Pure data, imported by the server
// (src/modules/batches/) and by the dashboard (web/lib/jsonl-check.ts, web/pages/batches.tsx), so
// nothing here may import.

/** The endpoints a batch may name (docs/api.md §6 `POST /v1/batches`); the first is the default. */
export const BATCH_ENDPOINTS = [
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/embeddings',
  '/v1/responses',
] as const
export type BatchEndpoint = (typeof BATCH_ENDPOINTS)[number]

/** The top-level fields a batch input line may carry. */
export const TOP_LEVEL: ReadonlySet<string> = new Set(['custom_id', 'body', 'method', 'url'])
