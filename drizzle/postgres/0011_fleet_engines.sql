ALTER TABLE "model_pulls" ADD COLUMN "progress_status" text;--> statement-breakpoint
ALTER TABLE "model_pulls" ADD COLUMN "completed_bytes" bigint;--> statement-breakpoint
ALTER TABLE "model_pulls" ADD COLUMN "total_bytes" bigint;--> statement-breakpoint
ALTER TABLE "workers" ADD COLUMN "loads" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "workers" ADD COLUMN "loading_models" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "workers" ADD COLUMN "model_stats" jsonb DEFAULT '[]'::jsonb NOT NULL;