CREATE TABLE `model_pull_failures` (
	`catalog_id` text NOT NULL,
	`worker_id` text NOT NULL,
	`runtime` text NOT NULL,
	`runtime_model_id` text NOT NULL,
	`pin` text NOT NULL,
	`failures` integer NOT NULL,
	`error` text NOT NULL,
	`failed_at` integer NOT NULL,
	`retry_at` integer NOT NULL,
	PRIMARY KEY(`catalog_id`, `worker_id`),
	FOREIGN KEY (`catalog_id`) REFERENCES `catalog_entries`(`id`) ON UPDATE cascade ON DELETE cascade,
	FOREIGN KEY (`worker_id`) REFERENCES `workers`(`id`) ON UPDATE no action ON DELETE cascade
);
