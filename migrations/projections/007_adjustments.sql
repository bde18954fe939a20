-- Adjustments of players' accounts: made by hand, a few a day at most.
-- The row is the adjustment as the API answers it (doc); n orders them,
-- player and state select them. A stream written before them holds none.
CREATE TABLE {{.schema}}.adjustments (
    id     text PRIMARY KEY,
    n      bigint NOT NULL UNIQUE,
    player text NOT NULL,
    state  text NOT NULL,
    doc    jsonb NOT NULL
);
CREATE INDEX adjustments_player ON {{.schema}}.adjustments (player, n);
CREATE INDEX adjustments_pending ON {{.schema}}.adjustments (n) WHERE state = 'pending';
-- What the approved adjustments moved, per day and kind, for the report
-- pack and the liability.
CREATE TABLE {{.schema}}.adjustment_days (
    day      date NOT NULL,
    kind     text NOT NULL,
    approved integer NOT NULL,
    credits  bigint NOT NULL,
    debits   bigint NOT NULL,
    PRIMARY KEY (day, kind)
);
