CREATE TABLE "batch_joins" (
	"batch_id" text PRIMARY KEY NOT NULL,
	"joiner" text NOT NULL,
	"lease_until" bigint NOT NULL,
	"blobs" jsonb NOT NULL
);
--> statement-breakpoint
ALTER TABLE "workers" ADD COLUMN "hosting_seq" integer DEFAULT 0 NOT NULL;