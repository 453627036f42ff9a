-- Kind versions (docs/howto/kind-versions.md): the version of its kind a job first
-- started on, and each recorded step's shape, so a replay on changed code is checked.
--
-- Expand only: two nullable columns without a default (no table rewrite), their checks
-- NOT VALID (rows written from now on are checked; the existing ones, all NULL there,
-- are not scanned under the lock), and code from before this migration keeps working
-- against them (it never names them).
-- jobs.kind_version: set by the first start (start_batch), never changed after; NULL for
-- a job that never started, or one that started before this migration (its version is
-- not known: it resumes on whatever code serves its kind).
-- effects.shape: what kind of step recorded the key ('effect', 'model_call', 'sleep',
-- 'spawn <kind>', ...: app/kinds/steps.py); NULL for a step recorded before this
-- migration (a replay of it is not checked).
ALTER TABLE jobs ADD COLUMN kind_version text;
ALTER TABLE jobs ADD CONSTRAINT jobs_kind_version_length
    CHECK (length(kind_version) BETWEEN 1 AND 64) NOT VALID;
ALTER TABLE effects ADD COLUMN shape text;
ALTER TABLE effects ADD CONSTRAINT effects_shape_length
    CHECK (length(shape) BETWEEN 1 AND 300) NOT VALID;
