DROP INDEX "batches_status_model";--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "needs" text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE "worker_runtimes" ADD COLUMN "capabilities" jsonb;--> statement-breakpoint
CREATE INDEX "batches_status_model" ON "batches" USING btree ("status","model","needs","user_id","seq");