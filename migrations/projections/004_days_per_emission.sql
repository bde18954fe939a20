-- Issue 16: reconciliation answers one emission's days (scope=day with
-- emission=), so day counters are kept per UTC day and emission; a day of
-- every emission adds its rows up. Emissions are a few a month: a day has
-- a handful of rows. The rows written before are rebuilt per emission from
-- the rows they were added from (plays, the journal, blocks and their
-- tiers), as the projection writes them, so that an existing generation
-- answers as a rebuilt one would.
CREATE TABLE {{.schema}}.emission_days (LIKE {{.schema}}.days);
ALTER TABLE {{.schema}}.emission_days ADD COLUMN emission text NOT NULL;
INSERT INTO {{.schema}}.emission_days (day, emission, units_sold, sales, prizes_paid, prizes_settled, prizes_owed, prize_fund,
    stake_mismatch, settle_mismatch, settled, settled_stakes, by_system)
SELECT day, emission, sum(units_sold), sum(sales), sum(prizes_paid), sum(prizes_settled), sum(prizes_owed), sum(prize_fund),
    sum(stake_mismatch), sum(settle_mismatch), sum(settled), sum(settled_stakes), sum(by_system)
FROM (
    -- Stakes, and the Article 3 prize of the unit each was assigned in
    -- the same append, at the same time (UnitAssigned follows its StakePlaced).
    SELECT (p.at AT TIME ZONE 'UTC')::date AS day, b.emission, 1 AS units_sold, p.stake AS sales, 0 AS prizes_paid,
        0 AS prizes_settled, coalesce(t.prize, 0) AS prizes_owed, 0 AS prize_fund, abs(p.stake - b.price) AS stake_mismatch,
        0 AS settle_mismatch, 0 AS settled, 0 AS settled_stakes, 0 AS by_system
    FROM {{.schema}}.plays p JOIN {{.schema}}.blocks b ON b.id = p.block
    LEFT JOIN {{.schema}}.block_tiers t ON t.block = p.block AND t.tier = p.proof_tier
    UNION ALL
    -- Settlements, against the prize of their tier.
    SELECT (p.settled_at AT TIME ZONE 'UTC')::date, b.emission, 0, 0, 0, p.prize, 0, 0, 0, abs(t.prize - p.prize),
        1, b.price, (p.status = 'completed_by_system')::integer
    FROM {{.schema}}.plays p JOIN {{.schema}}.blocks b ON b.id = p.block
    JOIN {{.schema}}.block_tiers t ON t.block = p.block AND t.tier = p.tier
    WHERE p.settled_at IS NOT NULL
    UNION ALL
    -- Prizes paid: the block's side of each PrizePaid posting.
    SELECT (j.at AT TIME ZONE 'UTC')::date, b.emission, 0, 0, j.amount, 0, 0, 0, 0, 0, 0, 0, 0
    FROM {{.schema}}.journal j JOIN {{.schema}}.plays p ON p.id = j.ref JOIN {{.schema}}.blocks b ON b.id = p.block
    WHERE j.event_type = 'PrizePaid' AND j.side = 'debit'
    UNION ALL
    -- The prize fund of each block, the day it opened.
    SELECT (b.opened_at AT TIME ZONE 'UTC')::date, b.emission, 0, 0, 0, 0, 0, sum(t.lots::bigint * t.prize), 0, 0, 0, 0, 0
    FROM {{.schema}}.blocks b JOIN {{.schema}}.block_tiers t ON t.block = b.id
    GROUP BY b.id
) r
GROUP BY day, emission;
DROP TABLE {{.schema}}.days;
ALTER TABLE {{.schema}}.emission_days RENAME TO days;
ALTER TABLE {{.schema}}.days ADD PRIMARY KEY (day, emission);
