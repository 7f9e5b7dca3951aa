-- Monthly revenue report for 2024.
SELECT strftime('%m', placed_at) AS month,
       SUM(amount_cents) / 100 AS revenue,
       COUNT(*) AS orders
FROM orders
GROUP BY month
ORDER BY month;
