ALTER TABLE "files" ADD COLUMN "expires_at" bigint;--> statement-breakpoint
CREATE INDEX "files_expires" ON "files" USING btree ("expires_at");