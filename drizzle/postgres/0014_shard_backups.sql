ALTER TABLE "batch_shards" ADD COLUMN "backup_worker_id" text;--> statement-breakpoint
ALTER TABLE "batch_shards" ADD COLUMN "backup_org_id" text;--> statement-breakpoint
ALTER TABLE "batch_shards" ADD COLUMN "backup_assignment_id" text;--> statement-breakpoint
ALTER TABLE "batch_shards" ADD COLUMN "backup_assigned_at" bigint;--> statement-breakpoint
ALTER TABLE "batch_shards" ADD COLUMN "backup_request_counts_completed" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "batch_shards" ADD COLUMN "backup_request_counts_failed" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "batch_shards" ADD COLUMN "backup_won" boolean DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX "batch_shards_backup" ON "batch_shards" USING btree ("backup_worker_id","status");