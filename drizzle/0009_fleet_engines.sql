ALTER TABLE `model_pulls` ADD `progress_status` text;--> statement-breakpoint
ALTER TABLE `model_pulls` ADD `completed_bytes` integer;--> statement-breakpoint
ALTER TABLE `model_pulls` ADD `total_bytes` integer;--> statement-breakpoint
ALTER TABLE `workers` ADD `loads` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `workers` ADD `loading_models` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
ALTER TABLE `workers` ADD `model_stats` text DEFAULT '[]' NOT NULL;