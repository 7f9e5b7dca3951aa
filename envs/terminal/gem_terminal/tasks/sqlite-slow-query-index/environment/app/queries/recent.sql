SELECT id, kind, ts FROM events WHERE user_id = :user AND ts >= :since ORDER BY ts DESC LIMIT 20;
