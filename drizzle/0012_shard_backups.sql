ALTER TABLE `batch_shards` ADD `backup_worker_id` text;--> statement-breakpoint
ALTER TABLE `batch_shards` ADD `backup_org_id` text;--> statement-breakpoint
ALTER TABLE `batch_shards` ADD `backup_assignment_id` text;--> statement-breakpoint
ALTER TABLE `batch_shards` ADD `backup_assigned_at` integer;--> statement-breakpoint
ALTER TABLE `batch_shards` ADD `backup_request_counts_completed` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `batch_shards` ADD `backup_request_counts_failed` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `batch_shards` ADD `backup_won` integer DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX `batch_shards_backup` ON `batch_shards` (`backup_worker_id`,`status`);