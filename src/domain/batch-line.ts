// The fields of a batch input line (docs/api.md §6 "Batch input line"): anything else on a line is an
// unknown field. Pure data, imported by the server's validation (src/modules/batches/validation.ts)
// and by the dashboard's check before upload (web/lib/jsonl-check.ts), so nothing here may import.

/** The top-level fields a batch input line may carry. */
export const TOP_LEVEL: ReadonlySet<string> = new Set(['custom_id', 'body', 'method', 'url'])
