ALTER TABLE "batch_line_index" ADD COLUMN "spans" "bytea";--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "ordered" boolean DEFAULT false NOT NULL;