-- The build statement of every snapshot reads a sandbox's current policy hash;
-- with the hash in the index it reads no table row, so reconcile does not page
-- in every sandbox's stored policy text every 30 s.
CREATE INDEX policy_revisions_hash ON policy_revisions (sandbox_id, revision, policy_hash);
