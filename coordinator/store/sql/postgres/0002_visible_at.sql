-- When the pending last run may first be claimed (notBefore, retry delays); NULL when the
-- last run is not pending. The exact counts tell pending (visible now) from delayed by it.
ALTER TABLE tasks ADD COLUMN visible_at BIGINT;
