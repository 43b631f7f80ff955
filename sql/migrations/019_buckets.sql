-- An item's stock in buckets (issue #57, docs/design.md "One item over many
-- shards").
--
-- bucket_salts: the salts of the item's buckets, in bucket order: bucket b's
-- Redis keys carry the hash tag {item:ID:S} with S = bucket_salts[b + 1],
-- and a user's bucket is a fixed hash of the user id modulo their number
-- (common/sale/bucket.h). Empty: no buckets, the item's sale lives on its
-- own slot {item:ID} as before. seckillctl item create --buckets K chooses
-- them (on K different primaries wherever the Redis Cluster has K) and item
-- load restores them into Redis from here: a bucket's salt never changes
-- during a sale (the users would change buckets with it, and could buy once
-- in each). One bucket is no buckets: the array has 0, or 2 to 16 salts,
-- each in [0, 4096) (BUCKET_MAX, BUCKET_SALT_TRIES); seckillctl refuses a
-- salt twice.
--
-- Additive and safe to run on a live database, and again. Only seckillctl's
-- role (the admin, which owns the table) reads it.
ALTER TABLE items ADD COLUMN IF NOT EXISTS bucket_salts integer[] NOT NULL DEFAULT '{}'
    CHECK (cardinality(bucket_salts) <> 1 AND cardinality(bucket_salts) <= 16
           AND 0 <= ALL (bucket_salts) AND 4096 > ALL (bucket_salts)
           AND array_position(bucket_salts, NULL) IS NULL);
