ALTER TABLE `worker_gpus` ADD `gpu_index` integer;--> statement-breakpoint
ALTER TABLE `workers` ADD `gpu_memory` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
ALTER TABLE `workers` ADD `model_gpus` text DEFAULT '[]' NOT NULL;