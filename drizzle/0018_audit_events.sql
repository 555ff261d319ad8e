CREATE TABLE `audit_events` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`created_at` integer NOT NULL,
	`actor_kind` text NOT NULL,
	`actor_id` text,
	`actor_user_id` text,
	`ip` text,
	`user_agent` text,
	`action` text NOT NULL,
	`target_kind` text NOT NULL,
	`target_id` text,
	`org_id` text,
	`details` text NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `audit_events_id_unique` ON `audit_events` (`id`);--> statement-breakpoint
CREATE INDEX `audit_events_org` ON `audit_events` (`org_id`,`seq`);--> statement-breakpoint
CREATE INDEX `audit_events_actor` ON `audit_events` (`actor_id`,`seq`);--> statement-breakpoint
CREATE INDEX `audit_events_actor_user` ON `audit_events` (`actor_user_id`,`seq`);--> statement-breakpoint
CREATE INDEX `audit_events_target` ON `audit_events` (`target_id`,`seq`);--> statement-breakpoint
CREATE INDEX `audit_events_action` ON `audit_events` (`action`,`seq`);--> statement-breakpoint
CREATE INDEX `audit_events_created` ON `audit_events` (`created_at`);