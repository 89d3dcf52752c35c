-- Per-state target counts kept on the fleet operation's row. Resolving one
-- target updates one row instead of counting every target of the operation,
-- and the row update serialises the last acks of an operation, so exactly
-- one of them sees no target left and ends it.
ALTER TABLE operations ADD COLUMN targets_total BIGINT NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN targets_pending BIGINT NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN targets_applied BIGINT NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN targets_failed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN targets_superseded BIGINT NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN targets_inactive BIGINT NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN targets_cancelled BIGINT NOT NULL DEFAULT 0;

UPDATE operations SET
    targets_total = (SELECT COUNT(*) FROM operation_targets t WHERE t.operation_id = operations.id),
    targets_pending = (SELECT COUNT(*) FROM operation_targets t WHERE t.operation_id = operations.id
                       AND t.state IN ('PENDING', 'DELIVERED')),
    targets_applied = (SELECT COUNT(*) FROM operation_targets t WHERE t.operation_id = operations.id
                       AND t.state = 'APPLIED'),
    targets_failed = (SELECT COUNT(*) FROM operation_targets t WHERE t.operation_id = operations.id
                      AND t.state = 'FAILED'),
    targets_superseded = (SELECT COUNT(*) FROM operation_targets t WHERE t.operation_id = operations.id
                          AND t.state = 'SUPERSEDED'),
    targets_inactive = (SELECT COUNT(*) FROM operation_targets t WHERE t.operation_id = operations.id
                        AND t.state = 'INACTIVE'),
    targets_cancelled = (SELECT COUNT(*) FROM operation_targets t WHERE t.operation_id = operations.id
                         AND t.state = 'CANCELLED')
WHERE target_kind <> 'sandbox';
