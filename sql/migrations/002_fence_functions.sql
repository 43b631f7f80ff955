-- fence_advance(name, fence): true when FENCE is newer than every fence seen
-- for NAME so far (and records it), false when it is stale. Call it inside
-- the transaction that does the protected write and roll back on false; the
-- row lock it takes serialises concurrent writers for the same name.
CREATE OR REPLACE FUNCTION fence_advance(p_name text, p_fence bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    advanced boolean;
BEGIN
    INSERT INTO lock_fences AS f (lock_name, fence) VALUES (p_name, p_fence)
    ON CONFLICT (lock_name) DO UPDATE SET fence = EXCLUDED.fence
        WHERE f.fence < EXCLUDED.fence
    RETURNING true INTO advanced;
    RETURN coalesce(advanced, false);
END;
$$;
