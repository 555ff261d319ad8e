ALTER TABLE "batches" ADD COLUMN "queued_at" bigint;--> statement-breakpoint
CREATE INDEX "batches_waiting" ON "batches" USING btree ("model","queued_at") WHERE status = 'validated';