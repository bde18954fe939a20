-- Tresor's read models (docs/projections.md). Every row is derived from the
-- event stream and rebuilt from it; amounts are integer euro cents; times
-- are microseconds (the read side's precision). Forward-only: no down step.

-- The stream sequence the rows cover, written in the same transaction.
CREATE TABLE {{.schema}}.checkpoint (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    seq        bigint NOT NULL CHECK (seq >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {{.schema}}.checkpoint (seq) VALUES (0);

CREATE TABLE {{.schema}}.accounts (
    player        text PRIMARY KEY,
    opened_at     timestamptz NOT NULL,
    balance       bigint NOT NULL,
    deposited     bigint NOT NULL,
    withdrawn     bigint NOT NULL,
    staked        bigint NOT NULL,
    won           bigint NOT NULL,
    plays         integer NOT NULL,
    self_excluded boolean NOT NULL,
    last_seq      bigint NOT NULL
);

-- Limits are kept as their changes and folded on read (ReplayLimits).
CREATE TABLE {{.schema}}.limit_changes (
    player       text NOT NULL,
    seq          bigint NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('deposit', 'stake')),
    at           timestamptz NOT NULL,
    amount       bigint NOT NULL,
    effective_at timestamptz NOT NULL,
    PRIMARY KEY (player, seq)
);

-- The double-entry journal: a debit line and a credit line per posting.
CREATE TABLE {{.schema}}.journal (
    seq         bigint NOT NULL,
    line        smallint NOT NULL,
    at          timestamptz NOT NULL,
    account     text NOT NULL,
    side        text NOT NULL CHECK (side IN ('debit', 'credit')),
    amount      bigint NOT NULL CHECK (amount >= 0),
    counterpart text NOT NULL,
    event_type  text NOT NULL,
    ref         text NOT NULL,
    -- One index serves both uniqueness and an account's pages.
    PRIMARY KEY (account, seq, line)
);

-- Running sums of the journal per ledger account.
CREATE TABLE {{.schema}}.account_totals (
    account text PRIMARY KEY,
    credits bigint NOT NULL,
    debits  bigint NOT NULL
);

CREATE TABLE {{.schema}}.emissions (
    id            text PRIMARY KEY,
    price         bigint NOT NULL,
    blocks        integer NOT NULL,
    rules_version text NOT NULL,
    created_at    timestamptz NOT NULL
);

CREATE TABLE {{.schema}}.blocks (
    id              text PRIMARY KEY,
    emission        text NOT NULL,
    idx             integer NOT NULL,
    price           bigint NOT NULL,
    units           integer NOT NULL,
    state           text NOT NULL CHECK (state IN ('open', 'exhausted', 'closed')),
    seed_hash       bytea NOT NULL,
    root            bytea NOT NULL,
    seed            bytea,
    opened_at       timestamptz NOT NULL,
    closed_at       timestamptz,
    settled         integer NOT NULL,
    units_sold      integer NOT NULL,
    sales           bigint NOT NULL,
    prizes_paid     bigint NOT NULL,
    prizes_settled  bigint NOT NULL,
    prizes_owed     bigint NOT NULL,
    prize_fund      bigint NOT NULL,
    stake_mismatch  bigint NOT NULL,
    settle_mismatch bigint NOT NULL,
    last_seq        bigint NOT NULL
);

-- Per block and tier: Article 3 lots and prize, units sold of the tier
-- (finance only) and plays settled on it.
CREATE TABLE {{.schema}}.block_tiers (
    block    text NOT NULL,
    tier     smallint NOT NULL,
    lots     integer NOT NULL,
    prize    bigint NOT NULL,
    assigned integer NOT NULL,
    paid     integer NOT NULL,
    PRIMARY KEY (block, tier)
);

-- Player history (Article 4.2): one row per play. throws holds 16 bytes per
-- throw (pgstore's throw encoding), appended as they are made.
CREATE TABLE {{.schema}}.plays (
    id             text PRIMARY KEY,
    player         text NOT NULL,
    seq            bigint NOT NULL,
    block          text NOT NULL,
    unit           integer NOT NULL,
    at             timestamptz NOT NULL,
    stake          bigint NOT NULL,
    status         text NOT NULL CHECK (status IN ('in_progress', 'settled', 'completed_by_system')),
    proof_tier     smallint,
    proof_salt     bytea,
    proof_path     bytea,
    throws         bytea NOT NULL,
    tier           smallint,
    prize          bigint,
    settled_at     timestamptz,
    balance_before bigint NOT NULL,
    balance_after  bigint NOT NULL
);
-- Keyset pagination newest first, and the last play in one index probe.
CREATE UNIQUE INDEX plays_history ON {{.schema}}.plays (player, seq);

-- Reconciliation counters per UTC day.
CREATE TABLE {{.schema}}.days (
    day             date PRIMARY KEY,
    units_sold      integer NOT NULL,
    sales           bigint NOT NULL,
    prizes_paid     bigint NOT NULL,
    prizes_settled  bigint NOT NULL,
    prizes_owed     bigint NOT NULL,
    prize_fund      bigint NOT NULL,
    stake_mismatch  bigint NOT NULL,
    settle_mismatch bigint NOT NULL
);
