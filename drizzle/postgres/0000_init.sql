CREATE TABLE "api_keys" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"key_type" text NOT NULL,
	"name" text NOT NULL,
	"prefix" text NOT NULL,
	"key_hash" text NOT NULL,
	"org_id" text,
	"user_id" text,
	"created_by" text,
	"created_at" bigint NOT NULL,
	"expires_at" bigint,
	"last_used_at" bigint,
	"revoked_at" bigint,
	CONSTRAINT "api_keys_id_unique" UNIQUE("id"),
	CONSTRAINT "api_keys_key_hash_unique" UNIQUE("key_hash")
);
--> statement-breakpoint
CREATE TABLE "artifact_files" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"catalog_id" text NOT NULL,
	"path" text NOT NULL,
	"sha256" text NOT NULL,
	"size_bytes" bigint,
	CONSTRAINT "artifact_files_entry_path" UNIQUE("catalog_id","path")
);
--> statement-breakpoint
CREATE TABLE "batch_assignments" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"batch_id" text NOT NULL,
	"worker_id" text NOT NULL,
	"org_id" text NOT NULL,
	"assigned_at" bigint NOT NULL,
	"completed_at" bigint,
	CONSTRAINT "batch_assignments_id_unique" UNIQUE("id"),
	CONSTRAINT "batch_assignments_batch_id_unique" UNIQUE("batch_id")
);
--> statement-breakpoint
CREATE TABLE "batch_errors" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"batch_id" text NOT NULL,
	"code" text NOT NULL,
	"line" integer,
	"field" text,
	"message" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "batches" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"user_id" text NOT NULL,
	"input_file_id" text NOT NULL,
	"endpoint" text NOT NULL,
	"completion_window" text NOT NULL,
	"model" text,
	"status" text NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"error" text,
	"errors_total" integer DEFAULT 0 NOT NULL,
	"request_counts_total" integer DEFAULT 0 NOT NULL,
	"request_counts_completed" integer DEFAULT 0 NOT NULL,
	"request_counts_failed" integer DEFAULT 0 NOT NULL,
	"output_file_id" text,
	"error_file_id" text,
	"metadata" jsonb,
	"usage" jsonb,
	"created_at" bigint NOT NULL,
	"in_progress_at" bigint,
	"completed_at" bigint,
	"failed_at" bigint,
	"updated_at" bigint NOT NULL,
	CONSTRAINT "batches_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "catalog_entries" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"display_name" text NOT NULL,
	"runtime" text,
	"runtime_model_id" text,
	"digest" text,
	"quantization" text,
	"parameter_size" text,
	"context_length" integer,
	"vram_gb" double precision,
	"size_gb" double precision,
	"task_type" text,
	"capabilities" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"lineage" text,
	"source_type" text,
	"source_ref" text,
	"source_revision" text,
	"homepage_url" text,
	"org_id" text,
	"status" text DEFAULT 'active' NOT NULL,
	"enabled" boolean DEFAULT true NOT NULL,
	"renamed_from" text,
	"created_at" bigint NOT NULL,
	"updated_at" bigint NOT NULL,
	CONSTRAINT "catalog_entries_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "files" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"user_id" text NOT NULL,
	"filename" text NOT NULL,
	"purpose" text NOT NULL,
	"bytes" bigint NOT NULL,
	"batch_id" text,
	"created_at" bigint NOT NULL,
	CONSTRAINT "files_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "maintenance_runs" (
	"name" text PRIMARY KEY NOT NULL,
	"last_run_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "memberships" (
	"org_id" text NOT NULL,
	"user_id" text NOT NULL,
	"role" text NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "memberships_org_id_user_id_pk" PRIMARY KEY("org_id","user_id")
);
--> statement-breakpoint
CREATE TABLE "model_pulls" (
	"catalog_id" text PRIMARY KEY NOT NULL,
	"worker_id" text NOT NULL,
	"runtime" text NOT NULL,
	"runtime_model_id" text NOT NULL,
	"asked_at" bigint NOT NULL,
	"last_progress_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "organizations" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"name" text NOT NULL,
	"personal" boolean DEFAULT false NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "organizations_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "password_reset_tokens" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"user_id" text NOT NULL,
	"token_hash" text NOT NULL,
	"created_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL,
	"used_at" bigint,
	CONSTRAINT "password_reset_tokens_token_hash_unique" UNIQUE("token_hash")
);
--> statement-breakpoint
CREATE TABLE "serving_profiles" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"catalog_id" text NOT NULL,
	"runtime" text NOT NULL,
	"runtime_model_id" text NOT NULL,
	"params" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"derived" boolean DEFAULT false NOT NULL,
	CONSTRAINT "serving_profiles_entry_runtime" UNIQUE("catalog_id","runtime")
);
--> statement-breakpoint
CREATE TABLE "users" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"email" text NOT NULL,
	"password_hash" text NOT NULL,
	"full_name" text NOT NULL,
	"platform_role" text DEFAULT 'user' NOT NULL,
	"is_active" boolean DEFAULT true NOT NULL,
	"must_change_password" boolean DEFAULT false NOT NULL,
	"token_version" integer DEFAULT 0 NOT NULL,
	"created_at" bigint NOT NULL,
	"updated_at" bigint NOT NULL,
	CONSTRAINT "users_id_unique" UNIQUE("id"),
	CONSTRAINT "users_email_unique" UNIQUE("email")
);
--> statement-breakpoint
CREATE TABLE "worker_gpus" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"worker_id" text NOT NULL,
	"vendor" text,
	"name" text,
	"vram_gb" double precision,
	"driver" text,
	"cuda" text
);
--> statement-breakpoint
CREATE TABLE "worker_models" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"worker_id" text NOT NULL,
	"name" text NOT NULL,
	"runtime" text,
	"runtime_model_id" text,
	"digest" text,
	"size_bytes" bigint,
	"status" text DEFAULT 'available' NOT NULL,
	"loaded" boolean DEFAULT false NOT NULL,
	"advertised" boolean DEFAULT false NOT NULL,
	"configured" boolean DEFAULT false NOT NULL,
	"on_disk" boolean DEFAULT false NOT NULL,
	CONSTRAINT "worker_models_name" UNIQUE("worker_id","name")
);
--> statement-breakpoint
CREATE TABLE "worker_runtimes" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"worker_id" text NOT NULL,
	"engine" text NOT NULL,
	"base_url" text NOT NULL,
	"status" text NOT NULL,
	CONSTRAINT "worker_runtimes_engine" UNIQUE("worker_id","engine")
);
--> statement-breakpoint
CREATE TABLE "workers" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"org_id" text NOT NULL,
	"key_id" text,
	"name" text NOT NULL,
	"hostname" text,
	"machine_id" text,
	"daemon_version" text,
	"status" text NOT NULL,
	"activity" text DEFAULT 'idle' NOT NULL,
	"vram_total_gb" double precision,
	"vram_available_gb" double precision,
	"gpu_utilization" double precision,
	"gpu_memory_used_gb" double precision,
	"loaded_models" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"inventory_sig" text,
	"current_job_id" text,
	"uptime_seconds" integer,
	"max_concurrent_jobs" integer DEFAULT 1 NOT NULL,
	"max_download_gb" double precision DEFAULT 0 NOT NULL,
	"registered_at" bigint NOT NULL,
	"last_heartbeat_at" bigint,
	"last_seen_at" bigint NOT NULL,
	CONSTRAINT "workers_id_unique" UNIQUE("id")
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "artifact_files" ADD CONSTRAINT "artifact_files_catalog_id_catalog_entries_id_fk" FOREIGN KEY ("catalog_id") REFERENCES "public"."catalog_entries"("id") ON DELETE cascade ON UPDATE cascade;--> statement-breakpoint
ALTER TABLE "batch_assignments" ADD CONSTRAINT "batch_assignments_batch_id_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "batch_errors" ADD CONSTRAINT "batch_errors_batch_id_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "batches" ADD CONSTRAINT "batches_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "files" ADD CONSTRAINT "files_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memberships" ADD CONSTRAINT "memberships_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memberships" ADD CONSTRAINT "memberships_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_pulls" ADD CONSTRAINT "model_pulls_catalog_id_catalog_entries_id_fk" FOREIGN KEY ("catalog_id") REFERENCES "public"."catalog_entries"("id") ON DELETE cascade ON UPDATE cascade;--> statement-breakpoint
ALTER TABLE "model_pulls" ADD CONSTRAINT "model_pulls_worker_id_workers_id_fk" FOREIGN KEY ("worker_id") REFERENCES "public"."workers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "password_reset_tokens" ADD CONSTRAINT "password_reset_tokens_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "serving_profiles" ADD CONSTRAINT "serving_profiles_catalog_id_catalog_entries_id_fk" FOREIGN KEY ("catalog_id") REFERENCES "public"."catalog_entries"("id") ON DELETE cascade ON UPDATE cascade;--> statement-breakpoint
ALTER TABLE "worker_gpus" ADD CONSTRAINT "worker_gpus_worker_id_workers_id_fk" FOREIGN KEY ("worker_id") REFERENCES "public"."workers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "worker_models" ADD CONSTRAINT "worker_models_worker_id_workers_id_fk" FOREIGN KEY ("worker_id") REFERENCES "public"."workers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "worker_runtimes" ADD CONSTRAINT "worker_runtimes_worker_id_workers_id_fk" FOREIGN KEY ("worker_id") REFERENCES "public"."workers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "workers" ADD CONSTRAINT "workers_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "api_keys_user" ON "api_keys" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "api_keys_org" ON "api_keys" USING btree ("org_id");--> statement-breakpoint
CREATE INDEX "batch_assignments_worker" ON "batch_assignments" USING btree ("worker_id","completed_at");--> statement-breakpoint
CREATE INDEX "batch_errors_batch" ON "batch_errors" USING btree ("batch_id");--> statement-breakpoint
CREATE INDEX "batches_user" ON "batches" USING btree ("user_id","seq");--> statement-breakpoint
CREATE INDEX "batches_status_model" ON "batches" USING btree ("status","model","seq");--> statement-breakpoint
CREATE INDEX "catalog_entries_renamed_from" ON "catalog_entries" USING btree ("renamed_from");--> statement-breakpoint
CREATE INDEX "files_user" ON "files" USING btree ("user_id","purpose");--> statement-breakpoint
CREATE INDEX "memberships_user" ON "memberships" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "password_reset_tokens_user" ON "password_reset_tokens" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "worker_gpus_worker" ON "worker_gpus" USING btree ("worker_id");--> statement-breakpoint
CREATE INDEX "worker_models_name_idx" ON "worker_models" USING btree ("name","worker_id");--> statement-breakpoint
CREATE INDEX "workers_org_machine" ON "workers" USING btree ("org_id","machine_id");