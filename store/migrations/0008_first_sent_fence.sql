-- 0008_first_sent_fence: records whether anything may have reached the
-- downstream, which a claim alone does not say (a claim can end in a release:
-- connection refused, nothing sent).
--
-- first_sent_fence is the fence of the first attempt that may have reached
-- the downstream: set by every transition that ends an attempt other than a
-- release, and by a lease takeover (the fenced-out holder may have sent). It
-- decides two rules in the guarded statements:
--   * an approval bounds when the first send may start: until something was
--     sent, an expired approval is expired, however often the operation was
--     claimed and released;
--   * FAILED is only for a definitive refusal of the first request that may
--     have reached the downstream: once an earlier attempt may have taken
--     effect, a later refusal proves nothing.
ALTER TABLE operation ADD COLUMN first_sent_fence bigint
    CHECK (first_sent_fence IS NULL OR first_sent_fence BETWEEN 1 AND fence);

-- Before this column a claim consumed the approval; keep that (conservative)
-- reading for operations claimed before the upgrade.
UPDATE operation SET first_sent_fence = 1 WHERE fence > 0;
