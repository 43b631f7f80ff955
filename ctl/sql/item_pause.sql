-- $1 item id, $2 'true' to pause its sale, 'false' to resume it (migration
-- 018). One row (the item) when it exists, none when it does not.
UPDATE items SET paused = $2::boolean WHERE item_id = $1 RETURNING item_id
