-- Storage settings of the tables rewritten under steady load (docs/store.md "PostgreSQL settings"): every container
-- row is inserted, updated 2–4 times and moved to history within minutes, every deploy and event updates its nodes'
-- usage, outbox and inbox rows live for minutes. Room on each page lets those updates stay HOT (no index write, no
-- new page), and vacuum runs after a small share of dead rows instead of the default 20 % (which on a table of a
-- few thousand live rows comes in rare, long bursts).
ALTER TABLE nodes SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
                       autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE containers SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02,
                            autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE deploys SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02,
                         autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE outbox SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02,
                        autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE inbox SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE deploy_waits SET (autovacuum_vacuum_scale_factor = 0.02);
