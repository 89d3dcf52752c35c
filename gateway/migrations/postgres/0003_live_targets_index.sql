-- Targets are only ever looked up by sandbox while they are live. An index
-- of the live ones alone shrinks as a fleet operation resolves: resolving a
-- target removes its entry instead of moving it to a terminal state, and
-- finished operations no longer grow the index.
DROP INDEX operation_targets_sandbox;
CREATE INDEX operation_targets_live ON operation_targets (sandbox_id)
    WHERE state IN ('PENDING', 'DELIVERED');
