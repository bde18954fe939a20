-- Issue 14: exclusions for a term, bans, limits of any period, statements
-- (a player's balance on every journal line) and the report pack (plays
-- completed by the system, plays settled per day, cash in and out per
-- day). Rows written before are backfilled from the rows already there,
-- so that an existing generation answers as a rebuilt one would.

ALTER TABLE {{.schema}}.accounts ADD COLUMN self_excluded_until timestamptz;

-- A limit change of schema 1 is a weekly limit.
ALTER TABLE {{.schema}}.limit_changes ADD COLUMN period_days integer NOT NULL DEFAULT 7 CHECK (period_days BETWEEN 1 AND 31);

-- A player's balance after each movement: statements and balances at any
-- instant read it instead of summing the journal.
ALTER TABLE {{.schema}}.journal ADD COLUMN balance_after bigint;
UPDATE {{.schema}}.journal j SET balance_after = r.balance
FROM (SELECT account, seq, line,
             sum(CASE WHEN side = 'credit' THEN amount ELSE -amount END) OVER (PARTITION BY account ORDER BY seq, line) AS balance
      FROM {{.schema}}.journal WHERE account LIKE 'player.%') r
WHERE j.account = r.account AND j.seq = r.seq AND j.line = r.line;
CREATE INDEX journal_at ON {{.schema}}.journal (account, at);

ALTER TABLE {{.schema}}.blocks ADD COLUMN by_system integer NOT NULL DEFAULT 0;
UPDATE {{.schema}}.blocks b SET by_system = c.n
FROM (SELECT block, count(*) AS n FROM {{.schema}}.plays WHERE status = 'completed_by_system' GROUP BY block) c
WHERE b.id = c.block;

ALTER TABLE {{.schema}}.days ADD COLUMN settled integer NOT NULL DEFAULT 0,
    ADD COLUMN settled_stakes bigint NOT NULL DEFAULT 0,
    ADD COLUMN by_system integer NOT NULL DEFAULT 0;
UPDATE {{.schema}}.days d SET settled = s.n, settled_stakes = s.stakes, by_system = s.by_system
FROM (SELECT (p.settled_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n, sum(b.price) AS stakes,
             count(*) FILTER (WHERE p.status = 'completed_by_system') AS by_system
      FROM {{.schema}}.plays p JOIN {{.schema}}.blocks b ON b.id = p.block
      WHERE p.settled_at IS NOT NULL GROUP BY 1) s
WHERE d.day = s.day;

-- Money paid into and out of players' accounts per UTC day.
CREATE TABLE {{.schema}}.cash_days (
    day         date PRIMARY KEY,
    deposits    bigint NOT NULL,
    withdrawals bigint NOT NULL
);
INSERT INTO {{.schema}}.cash_days (day, deposits, withdrawals)
SELECT (at AT TIME ZONE 'UTC')::date,
       coalesce(sum(amount) FILTER (WHERE event_type = 'FundsDeposited'), 0),
       coalesce(sum(amount) FILTER (WHERE event_type = 'FundsWithdrawn'), 0)
FROM {{.schema}}.journal WHERE account = 'house.cash' GROUP BY 1;

-- Bans, in force (lifted_seq null) and lifted.
CREATE TABLE {{.schema}}.bans (
    player            text NOT NULL,
    ban               text NOT NULL,
    seq               bigint NOT NULL,
    at                timestamptz NOT NULL,
    reference         text NOT NULL,
    reason            text NOT NULL,
    by_role           text,
    by_subject        text,
    lifted_seq        bigint,
    lifted_at         timestamptz,
    lift_reference    text,
    lift_reason       text,
    lifted_by_role    text,
    lifted_by_subject text,
    PRIMARY KEY (player, ban)
);

-- Large wins: the winning plays by settlement time.
CREATE INDEX plays_wins ON {{.schema}}.plays (settled_at) WHERE prize > 0;
