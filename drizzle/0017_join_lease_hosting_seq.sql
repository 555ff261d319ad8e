CREATE TABLE `batch_joins` (
	`batch_id` text PRIMARY KEY NOT NULL,
	`joiner` text NOT NULL,
	`lease_until` integer NOT NULL,
	`blobs` text NOT NULL
);
--> statement-breakpoint
ALTER TABLE `workers` ADD `hosting_seq` integer DEFAULT 0 NOT NULL;