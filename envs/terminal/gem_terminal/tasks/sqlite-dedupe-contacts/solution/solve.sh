#!/bin/bash
set -e
cat > /app/dedupe.sql <<'SQL'
-- Keep the lowest id of each email (ignoring case and surrounding spaces); notes follow it.
BEGIN;
CREATE TEMP TABLE keeper AS
SELECT c.id AS old, (SELECT min(k.id) FROM contacts AS k WHERE lower(trim(k.email)) = lower(trim(c.email))) AS new
FROM contacts AS c WHERE c.email IS NOT NULL;
UPDATE notes SET contact_id = (SELECT new FROM keeper WHERE old = notes.contact_id)
WHERE contact_id IN (SELECT old FROM keeper WHERE old <> new);
DELETE FROM contacts WHERE id IN (SELECT old FROM keeper WHERE old <> new);
UPDATE contacts SET email = lower(trim(email)) WHERE email IS NOT NULL;
-- Inserted emails are not normalised: the unique index is on the normalised form.
CREATE UNIQUE INDEX contacts_email ON contacts(lower(trim(email)));
DROP TABLE keeper;
COMMIT;
SQL
python3 -c "import sqlite3; con = sqlite3.connect('/app/crm.db'); con.executescript(open('/app/dedupe.sql').read())"
