CREATE TABLE "rate_limit_hits" (
	"rule" text NOT NULL,
	"key" text NOT NULL,
	"at" bigint NOT NULL
);
--> statement-breakpoint
CREATE INDEX "rate_limit_hits_key" ON "rate_limit_hits" USING btree ("rule","key","at");--> statement-breakpoint
CREATE INDEX "rate_limit_hits_at" ON "rate_limit_hits" USING btree ("rule","at");