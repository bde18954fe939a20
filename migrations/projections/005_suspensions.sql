-- Suspensions of sales: a few a year, each with its scope, who recorded
-- it, when and why, and the same of its end. A stream written before them
-- holds none: nothing to fill in.
CREATE TABLE {{.schema}}.suspensions (
    id                 text PRIMARY KEY,
    scope              text NOT NULL,
    seq                bigint NOT NULL UNIQUE,
    at                 timestamptz NOT NULL,
    reason             text NOT NULL,
    by_role            text,
    by_subject         text,
    resumed_seq        bigint,
    resumed_at         timestamptz,
    resume_reason      text,
    resumed_by_role    text,
    resumed_by_subject text
);
