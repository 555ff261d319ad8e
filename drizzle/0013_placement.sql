ALTER TABLE `batches` ADD `queued_at` integer;--> statement-breakpoint
CREATE INDEX `batches_waiting` ON `batches` (`model`,`queued_at`) WHERE status = 'validated' AND queued_at IS NOT NULL;