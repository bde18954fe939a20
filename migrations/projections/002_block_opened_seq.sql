-- The stream sequence of each block's BlockOpened, published with the
-- block's commitment (GET /v1/commitments) so that anyone holding a copy of
-- the stream finds the event the commitment comes from. Blocks projected
-- before this column existed read 0 until the projections are rebuilt
-- (tresor projections rebuild).
ALTER TABLE {{.schema}}.blocks ADD COLUMN opened_seq bigint NOT NULL DEFAULT 0;
