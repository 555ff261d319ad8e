ALTER TABLE "sso_logins" ADD COLUMN "browser_hash" text;--> statement-breakpoint
ALTER TABLE "sso_logins" ADD CONSTRAINT "sso_logins_browser_hash_unique" UNIQUE("browser_hash");