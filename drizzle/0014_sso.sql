CREATE TABLE `sso_logins` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`state_hash` text NOT NULL,
	`nonce` text NOT NULL,
	`code_verifier` text NOT NULL,
	`return_to` text,
	`redirect_uri` text,
	`client_state` text,
	`code_challenge` text,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`state_used_at` integer,
	`user_id` text,
	`code_hash` text,
	`code_expires_at` integer,
	`code_used_at` integer,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `sso_logins_state_hash_unique` ON `sso_logins` (`state_hash`);--> statement-breakpoint
CREATE UNIQUE INDEX `sso_logins_code_hash_unique` ON `sso_logins` (`code_hash`);--> statement-breakpoint
CREATE INDEX `sso_logins_expires` ON `sso_logins` (`expires_at`);--> statement-breakpoint
CREATE TABLE `user_identities` (
	`issuer` text NOT NULL,
	`subject` text NOT NULL,
	`user_id` text NOT NULL,
	`email` text,
	`created_at` integer NOT NULL,
	`last_sign_in_at` integer NOT NULL,
	PRIMARY KEY(`issuer`, `subject`),
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `user_identities_user_issuer` ON `user_identities` (`user_id`,`issuer`);