CREATE TABLE `api_keys` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`key_type` text NOT NULL,
	`name` text NOT NULL,
	`prefix` text NOT NULL,
	`key_hash` text NOT NULL,
	`org_id` text,
	`user_id` text,
	`created_by` text,
	`created_at` integer NOT NULL,
	`expires_at` integer,
	`last_used_at` integer,
	`revoked_at` integer,
	FOREIGN KEY (`org_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_id_unique` ON `api_keys` (`id`);--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_key_hash_unique` ON `api_keys` (`key_hash`);--> statement-breakpoint
CREATE INDEX `api_keys_user` ON `api_keys` (`user_id`);--> statement-breakpoint
CREATE INDEX `api_keys_org` ON `api_keys` (`org_id`);--> statement-breakpoint
CREATE TABLE `memberships` (
	`org_id` text NOT NULL,
	`user_id` text NOT NULL,
	`role` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`org_id`, `user_id`),
	FOREIGN KEY (`org_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `memberships_user` ON `memberships` (`user_id`);--> statement-breakpoint
CREATE TABLE `organizations` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`name` text NOT NULL,
	`personal` integer DEFAULT false NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `organizations_id_unique` ON `organizations` (`id`);--> statement-breakpoint
CREATE TABLE `password_reset_tokens` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`user_id` text NOT NULL,
	`token_hash` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`used_at` integer,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `password_reset_tokens_token_hash_unique` ON `password_reset_tokens` (`token_hash`);--> statement-breakpoint
CREATE INDEX `password_reset_tokens_user` ON `password_reset_tokens` (`user_id`);--> statement-breakpoint
CREATE TABLE `users` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`email` text NOT NULL,
	`password_hash` text NOT NULL,
	`full_name` text NOT NULL,
	`platform_role` text DEFAULT 'user' NOT NULL,
	`is_active` integer DEFAULT true NOT NULL,
	`must_change_password` integer DEFAULT false NOT NULL,
	`token_version` integer DEFAULT 0 NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `users_id_unique` ON `users` (`id`);--> statement-breakpoint
CREATE UNIQUE INDEX `users_email_unique` ON `users` (`email`);--> statement-breakpoint
CREATE TABLE `batch_assignments` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`batch_id` text NOT NULL,
	`worker_id` text NOT NULL,
	`org_id` text NOT NULL,
	`assigned_at` integer NOT NULL,
	`completed_at` integer,
	FOREIGN KEY (`batch_id`) REFERENCES `batches`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `batch_assignments_id_unique` ON `batch_assignments` (`id`);--> statement-breakpoint
CREATE UNIQUE INDEX `batch_assignments_batch_id_unique` ON `batch_assignments` (`batch_id`);--> statement-breakpoint
CREATE INDEX `batch_assignments_worker` ON `batch_assignments` (`worker_id`,`completed_at`);--> statement-breakpoint
CREATE TABLE `batch_errors` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`batch_id` text NOT NULL,
	`code` text NOT NULL,
	`line` integer,
	`field` text,
	`message` text NOT NULL,
	FOREIGN KEY (`batch_id`) REFERENCES `batches`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `batch_errors_batch` ON `batch_errors` (`batch_id`);--> statement-breakpoint
CREATE TABLE `batches` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`user_id` text NOT NULL,
	`input_file_id` text NOT NULL,
	`endpoint` text NOT NULL,
	`completion_window` text NOT NULL,
	`model` text,
	`status` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`error` text,
	`errors_total` integer DEFAULT 0 NOT NULL,
	`request_counts_total` integer DEFAULT 0 NOT NULL,
	`request_counts_completed` integer DEFAULT 0 NOT NULL,
	`request_counts_failed` integer DEFAULT 0 NOT NULL,
	`output_file_id` text,
	`error_file_id` text,
	`metadata` text,
	`usage` text,
	`created_at` integer NOT NULL,
	`in_progress_at` integer,
	`completed_at` integer,
	`failed_at` integer,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `batches_id_unique` ON `batches` (`id`);--> statement-breakpoint
CREATE INDEX `batches_user` ON `batches` (`user_id`,`seq`);--> statement-breakpoint
CREATE INDEX `batches_status_model` ON `batches` (`status`,`model`,`seq`);--> statement-breakpoint
CREATE TABLE `files` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`user_id` text NOT NULL,
	`filename` text NOT NULL,
	`purpose` text NOT NULL,
	`bytes` integer NOT NULL,
	`batch_id` text,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `files_id_unique` ON `files` (`id`);--> statement-breakpoint
CREATE INDEX `files_user` ON `files` (`user_id`,`purpose`);--> statement-breakpoint
CREATE TABLE `artifact_files` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`catalog_id` text NOT NULL,
	`path` text NOT NULL,
	`sha256` text NOT NULL,
	`size_bytes` integer,
	FOREIGN KEY (`catalog_id`) REFERENCES `catalog_entries`(`id`) ON UPDATE cascade ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `artifact_files_entry_path` ON `artifact_files` (`catalog_id`,`path`);--> statement-breakpoint
CREATE TABLE `catalog_entries` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`display_name` text NOT NULL,
	`runtime` text,
	`runtime_model_id` text,
	`digest` text,
	`quantization` text,
	`parameter_size` text,
	`context_length` integer,
	`vram_gb` real,
	`size_gb` real,
	`task_type` text,
	`capabilities` text DEFAULT '{}' NOT NULL,
	`lineage` text,
	`source_type` text,
	`source_ref` text,
	`source_revision` text,
	`homepage_url` text,
	`org_id` text,
	`status` text DEFAULT 'active' NOT NULL,
	`enabled` integer DEFAULT true NOT NULL,
	`renamed_from` text,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `catalog_entries_id_unique` ON `catalog_entries` (`id`);--> statement-breakpoint
CREATE INDEX `catalog_entries_renamed_from` ON `catalog_entries` (`renamed_from`);--> statement-breakpoint
CREATE TABLE `serving_profiles` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`catalog_id` text NOT NULL,
	`runtime` text NOT NULL,
	`runtime_model_id` text NOT NULL,
	`params` text DEFAULT '{}' NOT NULL,
	`derived` integer DEFAULT false NOT NULL,
	FOREIGN KEY (`catalog_id`) REFERENCES `catalog_entries`(`id`) ON UPDATE cascade ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `serving_profiles_entry_runtime` ON `serving_profiles` (`catalog_id`,`runtime`);--> statement-breakpoint
CREATE TABLE `model_pulls` (
	`catalog_id` text PRIMARY KEY NOT NULL,
	`worker_id` text NOT NULL,
	`runtime` text NOT NULL,
	`runtime_model_id` text NOT NULL,
	`asked_at` integer NOT NULL,
	`last_progress_at` integer NOT NULL,
	FOREIGN KEY (`catalog_id`) REFERENCES `catalog_entries`(`id`) ON UPDATE cascade ON DELETE cascade,
	FOREIGN KEY (`worker_id`) REFERENCES `workers`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `worker_gpus` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`worker_id` text NOT NULL,
	`vendor` text,
	`name` text,
	`vram_gb` real,
	`driver` text,
	`cuda` text,
	FOREIGN KEY (`worker_id`) REFERENCES `workers`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `worker_gpus_worker` ON `worker_gpus` (`worker_id`);--> statement-breakpoint
CREATE TABLE `worker_models` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`worker_id` text NOT NULL,
	`name` text NOT NULL,
	`runtime` text,
	`runtime_model_id` text,
	`digest` text,
	`size_bytes` integer,
	`status` text DEFAULT 'available' NOT NULL,
	`loaded` integer DEFAULT false NOT NULL,
	`advertised` integer DEFAULT false NOT NULL,
	`configured` integer DEFAULT false NOT NULL,
	`on_disk` integer DEFAULT false NOT NULL,
	FOREIGN KEY (`worker_id`) REFERENCES `workers`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `worker_models_name_idx` ON `worker_models` (`name`,`worker_id`);--> statement-breakpoint
CREATE UNIQUE INDEX `worker_models_name` ON `worker_models` (`worker_id`,`name`);--> statement-breakpoint
CREATE TABLE `worker_runtimes` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`worker_id` text NOT NULL,
	`engine` text NOT NULL,
	`base_url` text NOT NULL,
	`status` text NOT NULL,
	FOREIGN KEY (`worker_id`) REFERENCES `workers`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `worker_runtimes_engine` ON `worker_runtimes` (`worker_id`,`engine`);--> statement-breakpoint
CREATE TABLE `workers` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`org_id` text NOT NULL,
	`key_id` text,
	`name` text NOT NULL,
	`hostname` text,
	`machine_id` text,
	`daemon_version` text,
	`status` text NOT NULL,
	`activity` text DEFAULT 'idle' NOT NULL,
	`vram_total_gb` real,
	`vram_available_gb` real,
	`gpu_utilization` real,
	`gpu_memory_used_gb` real,
	`loaded_models` text DEFAULT '[]' NOT NULL,
	`inventory_sig` text,
	`current_job_id` text,
	`uptime_seconds` integer,
	`max_concurrent_jobs` integer DEFAULT 1 NOT NULL,
	`max_download_gb` real DEFAULT 0 NOT NULL,
	`registered_at` integer NOT NULL,
	`last_heartbeat_at` integer,
	`last_seen_at` integer NOT NULL,
	FOREIGN KEY (`org_id`) REFERENCES `organizations`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `workers_id_unique` ON `workers` (`id`);--> statement-breakpoint
CREATE INDEX `workers_org_machine` ON `workers` (`org_id`,`machine_id`);