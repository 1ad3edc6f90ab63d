-- An old worker's write, as it sends it before, during and after the migration: an
-- update of a run by id alone (prepared: re-planned by name after the cutover).
\set g random(1, 1000000)
UPDATE runs SET updated_at = now() WHERE id = overlay(md5(CAST(:g AS text)) placing '4' from 13);
