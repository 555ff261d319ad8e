ALTER TABLE `batch_line_index` ADD `spans` blob;--> statement-breakpoint
ALTER TABLE `batches` ADD `ordered` integer DEFAULT false NOT NULL;