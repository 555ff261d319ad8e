ALTER TABLE "batches" ADD COLUMN "api_key_id" text;--> statement-breakpoint
CREATE INDEX "batch_assignments_org" ON "batch_assignments" USING btree ("org_id","completed_at");--> statement-breakpoint
CREATE INDEX "batches_user_completed" ON "batches" USING btree ("user_id","completed_at");