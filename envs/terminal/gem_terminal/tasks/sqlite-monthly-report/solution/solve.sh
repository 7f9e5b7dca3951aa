#!/bin/bash
set -e
cat > /app/report.sql <<'SQL'
-- Monthly revenue report for 2024: every month, paid orders only, revenue in dollars and cents.
WITH RECURSIVE months(m) AS (
    SELECT 1 UNION ALL SELECT m + 1 FROM months WHERE m < 12
)
SELECT printf('2024-%02d', m) AS month,
       COALESCE(SUM(o.amount_cents), 0) / 100.0 AS revenue,
       COUNT(o.id) AS orders
FROM months
LEFT JOIN orders AS o
       ON o.status = 'paid' AND substr(o.placed_at, 1, 7) = printf('2024-%02d', m)
GROUP BY m
ORDER BY m;
SQL
