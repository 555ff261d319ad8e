ALTER TABLE `batches` ADD `api_key_id` text;--> statement-breakpoint
CREATE INDEX `batches_user_completed` ON `batches` (`user_id`,`completed_at`);--> statement-breakpoint
CREATE INDEX `batch_assignments_org` ON `batch_assignments` (`org_id`,`completed_at`);