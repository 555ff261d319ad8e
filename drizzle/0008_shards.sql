CREATE TABLE `batch_line_index` (
	`batch_id` text PRIMARY KEY NOT NULL,
	`offsets` blob NOT NULL,
	FOREIGN KEY (`batch_id`) REFERENCES `batches`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `batch_shards` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`batch_id` text NOT NULL,
	`user_id` text NOT NULL,
	`shard_index` integer NOT NULL,
	`first_request` integer NOT NULL,
	`requests` integer NOT NULL,
	`status` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`worker_id` text,
	`org_id` text,
	`assignment_id` text,
	`assigned_at` integer,
	`completed_at` integer,
	`request_counts_completed` integer DEFAULT 0 NOT NULL,
	`request_counts_failed` integer DEFAULT 0 NOT NULL,
	`usage` text,
	`output_key` text,
	`error_key` text,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`batch_id`) REFERENCES `batches`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `batch_shards_id_unique` ON `batch_shards` (`id`);--> statement-breakpoint
CREATE UNIQUE INDEX `batch_shards_batch` ON `batch_shards` (`batch_id`,`shard_index`);--> statement-breakpoint
CREATE INDEX `batch_shards_worker` ON `batch_shards` (`worker_id`,`status`);--> statement-breakpoint
CREATE INDEX `batch_shards_user` ON `batch_shards` (`user_id`,`status`);--> statement-breakpoint
CREATE INDEX `batch_shards_org` ON `batch_shards` (`org_id`,`completed_at`);--> statement-breakpoint
CREATE INDEX `batch_shards_status` ON `batch_shards` (`status`);--> statement-breakpoint
ALTER TABLE `batches` ADD `split` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `batches` ADD `next_request` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX `batches_split_model` ON `batches` (`model`,`seq`) WHERE split = 1 AND status = 'in_progress';--> statement-breakpoint
ALTER TABLE `workers` ADD `shards` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `workers` ADD `concurrency` integer;