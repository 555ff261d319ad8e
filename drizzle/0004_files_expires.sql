ALTER TABLE `files` ADD `expires_at` integer;--> statement-breakpoint
CREATE INDEX `files_expires` ON `files` (`expires_at`);