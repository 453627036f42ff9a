-- Cost (docs/explain/design.md#throttles): a model effect records the model that answered and the tokens
-- it reported, in the same fenced insert that records the effect. Nullable and without
-- a default: ADD COLUMN rewrites nothing, and a plain effect leaves them NULL.
ALTER TABLE effects ADD COLUMN model text;
ALTER TABLE effects ADD COLUMN input_tokens integer;
ALTER TABLE effects ADD COLUMN output_tokens integer;

-- GET /v1/usage sums a tenant's model effects by day: only model effects are indexed.
CREATE INDEX effects_model_recorded ON effects (recorded_at) WHERE model IS NOT NULL;
