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

UPDATE jobs j
SET runs = (SELECT count(*) FROM job_events e WHERE e.job_id = j.id AND e.to_state = 'running')
WHERE EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = j.id AND e.to_state = 'running');

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
