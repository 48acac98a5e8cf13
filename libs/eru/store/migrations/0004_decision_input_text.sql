-- A decision's input (an `eru plan` problem: every node of the pod, ≈35 KB for 40 nodes) is written once per request
-- and only read back whole (`eru replay`), never queried inside: as text PostgreSQL stores it without parsing it into
-- jsonb (measured: 1.4 ms of server CPU per 43 KB row as jsonb, 0.3–0.5 ms as text). The output stays jsonb.
ALTER TABLE decisions ALTER COLUMN input TYPE text USING input::text;
