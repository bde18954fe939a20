-- The stream sequence of the last event of each play's life (its
-- PrizePaid for a winner, else its PlaySettled; null while in progress),
-- so that a witness of the stream can be asked to cover the play's
-- settlement and payment, not only its stake. A winner's is its
-- PrizePaid, whose journal line on the player's account names the play:
-- backfilled exactly from there. Plays settled without a prize before
-- this migration keep null until the projections are rebuilt (tresor
-- projections rebuild): no row records where their PlaySettled is.
ALTER TABLE {{.schema}}.plays ADD COLUMN settled_seq bigint;
UPDATE {{.schema}}.plays p SET settled_seq = j.seq
FROM {{.schema}}.journal j
WHERE p.prize > 0 AND j.account = 'player.' || p.player AND j.side = 'credit'
    AND j.event_type = 'PrizePaid' AND j.ref = p.id;
