-- Order id blocks: every producer takes a block of 2^20 order ids from here
-- at start and whenever it has used half of the current one. The identity is
-- drawn inside a committed INSERT, so a block is never handed out twice, not
-- even after a crash; the row says who took it, for the operator.
CREATE TABLE order_id_blocks (
    block     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host      text NOT NULL,
    pid       integer NOT NULL,
    taken_at  timestamptz NOT NULL DEFAULT now()
);
