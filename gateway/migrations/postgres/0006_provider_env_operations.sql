-- An attach or detach is tracked by the provider environment revision it makes desired;
-- other operations leave it NULL.
ALTER TABLE operations ADD COLUMN provider_env_revision TEXT;
