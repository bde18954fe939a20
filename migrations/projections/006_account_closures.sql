-- Closures of accounts: when an account was closed (null while open, and
-- once reopened). A stream written before them closed none.
ALTER TABLE {{.schema}}.accounts ADD COLUMN closed_at timestamptz;
