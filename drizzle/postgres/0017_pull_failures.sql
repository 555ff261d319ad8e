CREATE TABLE "model_pull_failures" (
	"catalog_id" text NOT NULL,
	"worker_id" text NOT NULL,
	"runtime" text NOT NULL,
	"runtime_model_id" text NOT NULL,
	"pin" text NOT NULL,
	"failures" integer NOT NULL,
	"error" text NOT NULL,
	"failed_at" bigint NOT NULL,
	"retry_at" bigint NOT NULL,
	CONSTRAINT "model_pull_failures_catalog_id_worker_id_pk" PRIMARY KEY("catalog_id","worker_id")
);
--> statement-breakpoint
ALTER TABLE "model_pull_failures" ADD CONSTRAINT "model_pull_failures_catalog_id_catalog_entries_id_fk" FOREIGN KEY ("catalog_id") REFERENCES "public"."catalog_entries"("id") ON DELETE cascade ON UPDATE cascade;--> statement-breakpoint
ALTER TABLE "model_pull_failures" ADD CONSTRAINT "model_pull_failures_worker_id_workers_id_fk" FOREIGN KEY ("worker_id") REFERENCES "public"."workers"("id") ON DELETE cascade ON UPDATE no action;