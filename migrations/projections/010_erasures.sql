-- Erasures of personal data, proposed then approved or rejected: made by
-- hand, rare. The row is the erasure as the API answers it (doc); n
-- orders them, state selects the pending ones. A stream written before
-- erasures took four eyes holds none: its erasures were never pending.
CREATE TABLE {{.schema}}.erasures (
    id    text PRIMARY KEY,
    n     bigint NOT NULL UNIQUE,
    state text NOT NULL,
    doc   jsonb NOT NULL
);
CREATE INDEX erasures_pending ON {{.schema}}.erasures (n) WHERE state = 'pending';
