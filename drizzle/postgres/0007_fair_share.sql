DROP INDEX "batches_status_model";--> statement-breakpoint
CREATE INDEX "batches_status_user" ON "batches" USING btree ("status","user_id");--> statement-breakpoint
CREATE INDEX "batches_status_model" ON "batches" USING btree ("status","model","user_id","seq");