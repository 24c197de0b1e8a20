-- The bytes of a small s3 artifact carried in a run's report (resolveRuns `artifacts`, the
-- worker's run log): stored in its row, written in the report's transaction, instead of in the
-- blob store. NULL for every other artifact; an upload over an inline artifact clears it.
ALTER TABLE artifacts ADD COLUMN content BLOB;
