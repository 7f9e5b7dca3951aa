#!/bin/bash
set -e
cat > /app/queries/index.sql <<'SQL'
DROP INDEX IF EXISTS idx_kind;
CREATE INDEX IF NOT EXISTS idx_events_user_ts ON events(user_id, ts);
SQL
python3 -c "import sqlite3; con = sqlite3.connect('/app/events.db'); con.executescript(open('/app/queries/index.sql').read())"
