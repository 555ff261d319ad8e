-- jsonb values written through drizzle's bun-sql driver were stored as JSON strings of the value's
-- text (jsonb_typeof 'string'): each becomes the JSON value itself. Both of a batch's columns in one
-- pass, so each row is rewritten once.
UPDATE "batches" SET
  "metadata" = CASE WHEN jsonb_typeof("metadata") = 'string' THEN ("metadata" #>> '{}')::jsonb ELSE "metadata" END,
  "usage" = CASE WHEN jsonb_typeof("usage") = 'string' THEN ("usage" #>> '{}')::jsonb ELSE "usage" END
WHERE jsonb_typeof("metadata") = 'string' OR jsonb_typeof("usage") = 'string';--> statement-breakpoint
UPDATE "catalog_entries" SET "capabilities" = ("capabilities" #>> '{}')::jsonb WHERE jsonb_typeof("capabilities") = 'string';--> statement-breakpoint
UPDATE "serving_profiles" SET "params" = ("params" #>> '{}')::jsonb WHERE jsonb_typeof("params") = 'string';--> statement-breakpoint
UPDATE "workers" SET "loaded_models" = ("loaded_models" #>> '{}')::jsonb WHERE jsonb_typeof("loaded_models") = 'string';
