ALTER TABLE "batches" ADD COLUMN "validation_holder" text;--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "validation_lease_until" bigint;