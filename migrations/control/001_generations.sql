-- The generations of the projections: each is a full copy of the read
-- models in its own schema. Readers and the live projection use the one in
-- state 'current'; a rebuild fills a 'building' one from the first event and
-- switches it to current when it has caught up; the previous current is
-- 'retired' and dropped at the next switch. Forward-only: no down step.
CREATE TABLE {{.control}}.generations (
    gen         integer PRIMARY KEY CHECK (gen > 0),
    schema_name text NOT NULL UNIQUE,
    state       text NOT NULL CHECK (state IN ('building', 'current', 'retired')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    switched_at timestamptz
);

-- At most one generation is current.
CREATE UNIQUE INDEX generations_one_current ON {{.control}}.generations ((true)) WHERE state = 'current';
