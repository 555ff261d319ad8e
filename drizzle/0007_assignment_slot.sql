ALTER TABLE `batch_assignments` ADD `slot` integer;--> statement-breakpoint
CREATE UNIQUE INDEX `batch_assignments_slot` ON `batch_assignments` (`worker_id`,`slot`) WHERE completed_at IS NULL;