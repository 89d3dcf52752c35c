-- The policy revision (and its hash) a sandbox's supervisor last reported APPLIED. The
-- last report alone does not say it: a FAILED or retained report carries the revision that
-- was attempted, while the supervisor keeps running the one it applied before.
ALTER TABLE supervisor_reports ADD COLUMN applied_policy_revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE supervisor_reports ADD COLUMN applied_policy_hash TEXT NOT NULL DEFAULT '';
UPDATE supervisor_reports
SET applied_policy_revision = COALESCE(json_extract(revisions_json, '$.policy_revision'), 0),
    applied_policy_hash = COALESCE(json_extract(revisions_json, '$.policy_hash'), '')
WHERE status = 'APPLIED';
