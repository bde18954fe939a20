-- What the approved adjustments credited to and debited from each account,
-- so that its balance is deposited - withdrawn - staked + won +
-- adjusted_credits - adjusted_debits. The adjustments table holds every
-- adjustment up to the same checkpoint as the accounts, approved ones with
-- their amount: a generation that applied adjustments before this
-- migration gets its totals from there, exactly; one without gets zeros.
ALTER TABLE {{.schema}}.accounts
    ADD COLUMN adjusted_credits bigint NOT NULL DEFAULT 0,
    ADD COLUMN adjusted_debits  bigint NOT NULL DEFAULT 0;
UPDATE {{.schema}}.accounts a SET adjusted_credits = t.credits, adjusted_debits = t.debits
FROM (
    SELECT player,
        coalesce(sum(round((doc->>'amount')::numeric * 100)) FILTER (WHERE doc->>'direction' = 'credit'), 0)::bigint AS credits,
        coalesce(sum(round((doc->>'amount')::numeric * 100)) FILTER (WHERE doc->>'direction' = 'debit'), 0)::bigint AS debits
    FROM {{.schema}}.adjustments
    WHERE state = 'approved'
    GROUP BY player
) t
WHERE a.player = t.player;
