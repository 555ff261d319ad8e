CREATE TABLE "batch_line_index" (
	"batch_id" text PRIMARY KEY NOT NULL,
	"offsets" "bytea" NOT NULL
);
--> statement-breakpoint
CREATE TABLE "batch_shards" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"batch_id" text NOT NULL,
	"user_id" text NOT NULL,
	"shard_index" integer NOT NULL,
	"first_request" integer NOT NULL,
	"requests" integer NOT NULL,
	"status" text NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"worker_id" text,
	"org_id" text,
	"assignment_id" text,
	"assigned_at" bigint,
	"completed_at" bigint,
	"request_counts_completed" integer DEFAULT 0 NOT NULL,
	"request_counts_failed" integer DEFAULT 0 NOT NULL,
	"usage" jsonb,
	"output_key" text,
	"error_key" text,
	"updated_at" bigint NOT NULL,
	CONSTRAINT "batch_shards_id_unique" UNIQUE("id")
);
--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "split" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "next_request" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "workers" ADD COLUMN "shards" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "workers" ADD COLUMN "concurrency" integer;--> statement-breakpoint
ALTER TABLE "batch_line_index" ADD CONSTRAINT "batch_line_index_batch_id_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "batch_shards" ADD CONSTRAINT "batch_shards_batch_id_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "batch_shards_batch" ON "batch_shards" USING btree ("batch_id","shard_index");--> statement-breakpoint
CREATE INDEX "batch_shards_worker" ON "batch_shards" USING btree ("worker_id","status");--> statement-breakpoint
CREATE INDEX "batch_shards_user" ON "batch_shards" USING btree ("user_id","status");--> statement-breakpoint
CREATE INDEX "batch_shards_org" ON "batch_shards" USING btree ("org_id","completed_at");--> statement-breakpoint
CREATE INDEX "batch_shards_status" ON "batch_shards" USING btree ("status");--> statement-breakpoint
CREATE INDEX "batches_split_model" ON "batches" USING btree ("model","seq") WHERE split AND status = 'in_progress';