ALTER TABLE `batches` ADD `queued_at` integer;--> statement-breakpoint
CREATE INDEX `batches_waiting` ON `batches` (`model`,`queued_at`) WHERE status = 'validated' AND queued_at IS NOT NULL;--> statement-breakpoint
-- docs/api.md §7 placement: a batch already waiting has waited since its last change.
UPDATE `batches` SET `queued_at` = `updated_at` WHERE `status` = 'validated' AND `queued_at` IS NULL;
