#!/bin/bash
set -e
cat > /app/migrations/002.sql <<'SQL'
-- Version 1 -> 2: users(id, full_name, email) becomes users(id, first_name, last_name, email).
BEGIN;
CREATE TABLE users_v2 (id INTEGER PRIMARY KEY, first_name TEXT NOT NULL, last_name TEXT NOT NULL, email TEXT);
INSERT INTO users_v2 (id, first_name, last_name, email)
SELECT id,
       CASE WHEN instr(full_name, ' ') > 0 THEN substr(full_name, 1, instr(full_name, ' ') - 1) ELSE full_name END,
       CASE WHEN instr(full_name, ' ') > 0 THEN substr(full_name, instr(full_name, ' ') + 1) ELSE '' END,
       lower(trim(email))
FROM users;
DROP TABLE users;
ALTER TABLE users_v2 RENAME TO users;
CREATE UNIQUE INDEX users_email ON users(email);
PRAGMA user_version = 2;
COMMIT;
SQL
python3 -c "import sqlite3; con = sqlite3.connect('/app/app.db'); con.executescript(open('/app/migrations/002.sql').read())"
