CREATE TABLE "audit_events" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"created_at" bigint NOT NULL,
	"actor_kind" text NOT NULL,
	"actor_id" text,
	"actor_user_id" text,
	"ip" text,
	"user_agent" text,
	"action" text NOT NULL,
	"target_kind" text NOT NULL,
	"target_id" text,
	"org_id" text,
	"details" jsonb NOT NULL,
	CONSTRAINT "audit_events_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE INDEX "audit_events_org" ON "audit_events" USING btree ("org_id","seq");--> statement-breakpoint
CREATE INDEX "audit_events_actor" ON "audit_events" USING btree ("actor_id","seq");--> statement-breakpoint
CREATE INDEX "audit_events_actor_user" ON "audit_events" USING btree ("actor_user_id","seq");--> statement-breakpoint
CREATE INDEX "audit_events_target" ON "audit_events" USING btree ("target_id","seq");--> statement-breakpoint
CREATE INDEX "audit_events_action" ON "audit_events" USING btree ("action","seq");--> statement-breakpoint
CREATE INDEX "audit_events_created" ON "audit_events" USING btree ("created_at");