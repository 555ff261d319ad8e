CREATE TABLE "sso_logins" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"state_hash" text NOT NULL,
	"nonce" text NOT NULL,
	"code_verifier" text NOT NULL,
	"return_to" text,
	"redirect_uri" text,
	"client_state" text,
	"code_challenge" text,
	"created_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL,
	"state_used_at" bigint,
	"user_id" text,
	"code_hash" text,
	"code_expires_at" bigint,
	"code_used_at" bigint,
	CONSTRAINT "sso_logins_state_hash_unique" UNIQUE("state_hash"),
	CONSTRAINT "sso_logins_code_hash_unique" UNIQUE("code_hash")
);
--> statement-breakpoint
CREATE TABLE "user_identities" (
	"issuer" text NOT NULL,
	"subject" text NOT NULL,
	"user_id" text NOT NULL,
	"email" text,
	"created_at" bigint NOT NULL,
	"last_sign_in_at" bigint NOT NULL,
	CONSTRAINT "user_identities_issuer_subject_pk" PRIMARY KEY("issuer","subject")
);
--> statement-breakpoint
ALTER TABLE "sso_logins" ADD CONSTRAINT "sso_logins_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_identities" ADD CONSTRAINT "user_identities_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "sso_logins_expires" ON "sso_logins" USING btree ("expires_at");--> statement-breakpoint
CREATE UNIQUE INDEX "user_identities_user_issuer" ON "user_identities" USING btree ("user_id","issuer");