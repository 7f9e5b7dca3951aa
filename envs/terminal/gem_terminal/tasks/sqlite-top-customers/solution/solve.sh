#!/bin/bash
set -e
cat > /app/top_customers.sql <<'SQL'
SELECT c.name, ROUND(SUM(i.quantity * i.unit_price), 2) AS total
FROM customers AS c
JOIN orders AS o ON o.customer_id = c.id
JOIN order_items AS i ON i.order_id = o.id
WHERE o.status = 'paid' AND o.placed_at >= '2024-01-01' AND o.placed_at < '2025-01-01'
GROUP BY c.id
ORDER BY total DESC, c.name ASC
LIMIT 3;
SQL
