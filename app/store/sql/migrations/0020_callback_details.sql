-- What a callback asks, for whoever answers it (issue 31): a kind's small JSON
-- (ctx.wait_for_callback(..., details=...)), e.g. an agent's tool call that needs
-- approval as {"tool": ..., "args": ...}, shown beside Approve and Reject in the web view
-- and in `tasklease jobs show`. Written by the insert that opens the callback, so no new
-- step or crash point. Nullable and without a default: ADD COLUMN rewrites nothing, and
-- callbacks opened before (or without details) leave it NULL.
ALTER TABLE callbacks ADD COLUMN details jsonb;
