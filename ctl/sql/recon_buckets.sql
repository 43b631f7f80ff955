-- $1 item id: its buckets' salts ("S0,S1,...", '': none; migration 019),
-- which name the Redis slots reconcile reads (issue #57). Read before Redis,
-- apart from recon_item.sql (read after it): the salts never change while a
-- sale runs, and the slots must be known before they are read.
SELECT array_to_string(i.bucket_salts, ',') AS bucket_salts FROM items i WHERE i.item_id = $1
