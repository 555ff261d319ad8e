ALTER TABLE `sso_logins` ADD `browser_hash` text;--> statement-breakpoint
CREATE UNIQUE INDEX `sso_logins_browser_hash_unique` ON `sso_logins` (`browser_hash`);