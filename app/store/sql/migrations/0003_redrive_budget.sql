-- Issue 13: a per-job redrive budget, and how many times each job's code ran.
--
-- runs: every start of the kind's code (leased -> running), across attempts and redrives,
-- so "attempt 1" never hides forty runs. Existing jobs count their recorded starts.
-- redriven_at: when the job was redriven, trimmed to the redrive window at each redrive;
-- TASKLEASE_REDRIVE_BUDGET redrives within TASKLEASE_REDRIVE_WINDOW_SECONDS, then a
-- redriven message is deleted unrun (unless forced by an operator).
ALTER TABLE jobs
    ADD COLUMN runs        integer       NOT NULL DEFAULT 0 CHECK (runs >= 0),
    ADD COLUMN redriven_at timestamptz[] NOT NULL DEFAULT '{}';

-- Existing jobs: the starts and the redrives (in the default window, 24 h) their
-- timelines recorded, one pass over job_events, each job row written once, so a job a
-- tool was already looping keeps no fresh budget after the upgrade.
UPDATE jobs j
SET runs = h.runs, redriven_at = h.redriven_at
FROM (
    SELECT job_id,
           count(*) FILTER (WHERE to_state = 'running') AS runs,
           coalesce(array_agg(at ORDER BY at) FILTER (
               WHERE from_state = 'dead_lettered' AND to_state <> 'dead_lettered'
                 AND at > now() - interval '24 hours'), '{}') AS redriven_at
    FROM job_events
    WHERE to_state = 'running'
       OR (from_state = 'dead_lettered' AND at > now() - interval '24 hours')
    GROUP BY job_id
) h
WHERE j.id = h.job_id;

-- Redrives of a job within the window ending now.
CREATE FUNCTION redrives_within(redriven_at timestamptz[], window_seconds double precision)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT count(*)::integer FROM unnest(redriven_at) AS t(at)
    WHERE at > now() - make_interval(secs => window_seconds)
$$;

-- The redrive log with one more redrive now, older entries than the window dropped.
CREATE FUNCTION redriven_now(redriven_at timestamptz[], window_seconds double precision)
RETURNS timestamptz[] LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(at ORDER BY at), '{}')
    FROM unnest(redriven_at || now()) AS t(at)
    WHERE at > now() - make_interval(secs => window_seconds)
$$;
