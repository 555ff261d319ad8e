DROP INDEX `batches_status_model`;--> statement-breakpoint
CREATE INDEX `batches_status_user` ON `batches` (`status`,`user_id`);--> statement-breakpoint
CREATE INDEX `batches_status_model` ON `batches` (`status`,`model`,`user_id`,`seq`);