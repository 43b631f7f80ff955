INSERT INTO order_id_blocks (host, pid) VALUES ($1, $2::integer) RETURNING block
