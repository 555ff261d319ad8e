ALTER TABLE "worker_gpus" ADD COLUMN "gpu_index" integer;--> statement-breakpoint
ALTER TABLE "workers" ADD COLUMN "gpu_memory" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "workers" ADD COLUMN "model_gpus" jsonb DEFAULT '[]'::jsonb NOT NULL;