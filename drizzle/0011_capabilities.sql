DROP INDEX `batches_status_model`;--> statement-breakpoint
ALTER TABLE `batches` ADD `needs` text DEFAULT '' NOT NULL;--> statement-breakpoint
CREATE INDEX `batches_status_model` ON `batches` (`status`,`model`,`needs`,`user_id`,`seq`);--> statement-breakpoint
ALTER TABLE `worker_runtimes` ADD `capabilities` text;